// placeholder: base64 (docs/architecture.md §13)
