/* A monotonic clock for progress messages. */
#ifndef PULSEINFER_CLI_CLOCK_H_
#define PULSEINFER_CLI_CLOCK_H_

double clock_seconds(void);

#endif /* PULSEINFER_CLI_CLOCK_H_ */
