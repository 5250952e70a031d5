#define WSRC_FILE "w.npz"
#define WSRC_DIR 0
#include "wsrc_harness.h"
