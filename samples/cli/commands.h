/* The subcommands of pulseinfer. Each takes the arguments after its name and returns the exit
 * code (kExitOk, kExitFailure, kExitUsage). */
#ifndef PULSEINFER_CLI_COMMANDS_H_
#define PULSEINFER_CLI_COMMANDS_H_

int command_info(int argc, char** argv);
int command_generate(int argc, char** argv);
int command_chat(int argc, char** argv);

#endif /* PULSEINFER_CLI_COMMANDS_H_ */
