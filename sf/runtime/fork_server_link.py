"""The last module the fork server preloads: importing it there links the server's life to the main process's
(`sf.runtime.parent_link.arm_server`). Imported anywhere else it does nothing."""

from sf.runtime.parent_link import arm_server

arm_server()
