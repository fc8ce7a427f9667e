"""Profiling inside a training: the profiling section of the flags (`config`), profiler backends by name
(`backends`), capture windows over learner iterations and the process-start hook (`window`, `launch`), ranges on
Timing scopes (`ranges`), the timeline of every process (`timeline`), process resources (`resources`), work versus
waiting (`activity`), staleness histograms (`staleness`) and the profile series (`series`). It imports only
`sf.utils`; the offline analysis lives in `sf.analysis`, the cross-stack breakdown in `sf.breakdown`."""
