#include <stdio.h>
int main(void)
{
	puts("onnx-moe-repair: not yet");
	return 0;
}
