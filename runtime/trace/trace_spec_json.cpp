// placeholder: trace_spec_json (docs/architecture.md §13)
