"""The first module the fork server preloads: importing it there links the server's life to the main process's
(`sf.supervision.parent_link.arm_server`), and spares the server's exit the final collection of torch's objects
(`sf.utils.fast_exit`), which the runner waits for at the end of every run. Imported anywhere else it does nothing
more than that second part."""

from sf.supervision.parent_link import arm_server
from sf.utils.fast_exit import skip_final_collection

arm_server()
skip_final_collection()
