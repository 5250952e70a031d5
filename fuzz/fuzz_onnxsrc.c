#define WSRC_FILE "w.onnx"
#define WSRC_DIR 0
#include "wsrc_harness.h"
