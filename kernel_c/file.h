// file.h: open files, in-memory inodes and the device switch.

struct file {
  enum { FD_NONE, FD_PIPE, FD_INODE, FD_DEVICE } type;
  int ref;              // reference count
  char readable;
  char writable;
  struct pipe *pipe;    // FD_PIPE
  struct inode *ip;     // FD_INODE and FD_DEVICE
  uint off;             // FD_INODE
  short major;          // FD_DEVICE
};

#define MAJOR(dev)      ((dev) >> 16 & 0xFFFF)
#define MINOR(dev)      ((dev) & 0xFFFF)
#define MKDEV(m, n)     ((uint)((m) << 16 | (n)))

// in-memory copy of an inode
struct inode {
  uint dev;             // device number
  uint inum;            // inode number
  int ref;              // reference count
  struct sleeplock lock; // protects everything below
  int valid;            // has been read from disk?
  int corrupt;          // read from disk and impossible (fs.c badinode)

  short type;           // copy of struct dinode
  short major;
  short minor;
  short nlink;
  uint size;
  uint addrs[NDIRECT+2];
};

// a device's read and write; user_dst/user_src say whether addr is a user
// virtual address (1) or a kernel address (0)
struct devsw {
  int (*read)(int user_dst, uint64 addr, int n);
  int (*write)(int user_src, uint64 addr, int n);
};

extern struct devsw devsw[];
