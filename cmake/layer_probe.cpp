// Linked with every object of one layer's library (whole archive) and only the libraries
// that layer declares: it links only if the layer calls nothing above itself
// (cmake/layering.cmake, docs/architecture.md §1).
int main() { return 0; }
