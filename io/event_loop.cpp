// placeholder, replaced by the runtime
