#include <stdlib.h>
unsigned long __isoc23_strtoul(const char *s, char **e, int b) { return strtoul(s, e, b); }
