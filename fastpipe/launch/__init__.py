"""Where training processes come from: one fresh process, torch elastic for ddp/fsdp, repeats."""
