// placeholder: activation_store (docs/architecture.md §13)
