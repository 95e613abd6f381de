int RunBench(int, char**) { return 0; }
