// device.h: device major numbers for mknod() and T_DEVICE inodes. Shared
// with user programs (init creates "console") and harness/disk/fsimage.py.

#define CONSOLE   1   // the UART console (console.c); minor 0
