#define WSRC_FILE "npy/w.npy"
#define WSRC_DIR 1
#include "wsrc_harness.h"
