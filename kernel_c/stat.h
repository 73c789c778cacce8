// stat.h: what fstat() reports. Shared with user programs.

#define T_DIR     1   // directory
#define T_FILE    2   // file
#define T_DEVICE  3   // device

struct stat {
  int dev;      // file system's disk device
  uint ino;     // inode number
  short type;   // type of file
  short nlink;  // number of links to file
  uint64 size;  // size of file in bytes
};
