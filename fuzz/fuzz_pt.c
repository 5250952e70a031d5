#define WSRC_FILE "w.pt"
#define WSRC_DIR 0
#include "wsrc_harness.h"
