#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void loaded(void) {
    const char *marker = getenv("SHARDKIT_PLUGIN_MARKER");
    if (marker) { FILE *f = fopen(marker, "a"); if (f) { fputs("loaded\n", f); fclose(f); } }
}
int H5PLget_plugin_type(void) { return -1; }
const void *H5PLget_plugin_info(void) { return 0; }
