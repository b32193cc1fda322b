// placeholder: trace_spec (docs/architecture.md §13)
