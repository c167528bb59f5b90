// pgtide: the binary's entry point.
int main() { return 0; }
