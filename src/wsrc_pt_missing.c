/* TEMPORARY, branch 'weights' only: the .pt reader lives on branch 'pt'
 * (src/wsrc_pt.c). This stand-in lets this branch link; the lead deletes it
 * (and its Makefile.am line) when merging 'pt'. */
#include "wsrc.h"

int wsrc_read_pt(WSrc *w, const char *key, Err *e)
{
	(void)w;
	(void)key;
	return errf(e, ".pt checkpoints are not supported yet; convert to .safetensors");
}
