// Everything CLinux offers is inline, in include/CLinux.h.
#include "CLinux.h"
