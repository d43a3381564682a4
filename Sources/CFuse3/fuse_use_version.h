// The libfuse API version coordfs is written against, pinned once: the module map's shim.h and the
// C under the mount (CFusePassthrough) include this before any libfuse header.
#ifndef COORDFS_FUSE_USE_VERSION_H
#define COORDFS_FUSE_USE_VERSION_H
#define FUSE_USE_VERSION 312
#endif
