"""One builder per group's stage: precision, compile, optimizer and lr scaling, schedules, EMA, FSDP, tasks, profiling."""
