#define WSRC_FILE "w.safetensors"
#define WSRC_DIR 0
#include "wsrc_harness.h"
