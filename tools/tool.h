// The subcommands of the octattn program.
#ifndef OCTATTN_TOOLS_TOOL_H_
#define OCTATTN_TOOLS_TOOL_H_

int RunInfo(int argc, char** argv);
int RunDemo(int argc, char** argv);
int RunBench(int argc, char** argv);

#endif  // OCTATTN_TOOLS_TOOL_H_
