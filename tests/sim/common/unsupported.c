/* What a call the simulated node does not model does: say so once per function on stderr, then
   return the library's "not supported" code. Called by the generated weak stubs. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define P2PSIM_MAX_REPORTED 512

static const char* reported[P2PSIM_MAX_REPORTED];
static int n_reported;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

__attribute__((visibility("hidden"))) int p2psim_unsupported(const char* name, int code, const char* code_name) {
  pthread_mutex_lock(&mu);
  int seen = 0;
  for (int i = 0; i < n_reported; ++i)
    if (reported[i] == name) seen = 1;
  if (!seen && n_reported < P2PSIM_MAX_REPORTED) reported[n_reported++] = name;
  pthread_mutex_unlock(&mu);
  if (!seen) fprintf(stderr, "p2psim: %s is not simulated; it returns %s (%d)\n", name, code_name, code);
  return code;
}
