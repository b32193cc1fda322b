// placeholder: activation_recorder (docs/architecture.md §13)
