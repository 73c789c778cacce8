// fs.h: the on-disk file system format, shared by the kernel (fs.c) and the
// host image builder (harness/disk/fsimage.py parses the #defines and structs
// below; never retype them there). Keep each object-like #define an integer
// expression of earlier names and sizeof(struct ...), and struct fields of
// the types in types.h, so the parser can read them.
//
// Disk layout, in BSIZE blocks:
//   [ boot block | super block | log | inode blocks | free bit map | data blocks ]
// Block 0 is unused; block 1 holds struct superblock. The log (log.c) is
// sb.nlog blocks at sb.logstart: a struct logheader, then LOGBLOCKS blocks
// of logged data. A committed transaction (header n > 0) is copied to its
// home blocks at mount, so every system call's changes reach the disk all
// or nothing.

#define ROOTINO     1           // root directory inode number
#define BSIZE       1024        // block size in bytes
#define FSMAGIC     0x10203040  // superblock.magic

// a file's blocks: NDIRECT direct, one singly indirect block of NINDIRECT
// numbers, and one doubly indirect block (NINDIRECT blocks of NINDIRECT)
#define NDIRECT     11
#define NINDIRECT   (BSIZE / 4)
#define NDINDIRECT  (NINDIRECT * NINDIRECT)
#define MAXFILE     (NDIRECT + NINDIRECT + NDINDIRECT)

// dinode.type values are T_DIR, T_FILE and T_DEVICE from stat.h; 0 = free

// a directory is a file of struct dirent; inum 0 marks a free entry
#define DIRSIZ      14

// the log: one system call writes at most MAXOPBLOCKS distinct blocks,
// and a transaction holds the blocks of up to LOGBLOCKS / MAXOPBLOCKS of them
#define MAXOPBLOCKS 10
#define LOGBLOCKS   (MAXOPBLOCKS * 3)
#define LOGSIZE     (LOGBLOCKS + 1)   // the header block, then the data

struct superblock {
  uint magic;           // FSMAGIC
  uint size;            // size of the image in blocks
  uint nblocks;         // number of data blocks
  uint ninodes;         // number of inodes
  uint nlog;            // number of log blocks (LOGSIZE)
  uint logstart;        // block number of the log header
  uint inodestart;      // block number of the first inode block
  uint bmapstart;       // block number of the first free-map block
};

// block sb.logstart: n = 0, or a committed transaction of n blocks whose
// contents are in blocks logstart+1 .. logstart+n, each to be copied to
// block[i]
struct logheader {
  uint n;
  uint block[LOGBLOCKS];
};

struct dinode {
  short type;           // file type; 0 = free inode
  short major;          // major device number (T_DEVICE only)
  short minor;          // minor device number (T_DEVICE only)
  short nlink;          // number of directory entries naming this inode
  uint size;            // size of the file in bytes
  uint addrs[NDIRECT+2]; // direct blocks, then indirect, then double indirect
};

struct dirent {
  ushort inum;          // 0 = free slot
  char name[DIRSIZ];    // not NUL-terminated when DIRSIZ long
};

#define IPB         (BSIZE / sizeof(struct dinode))  // inodes per block
#define BPB         (BSIZE * 8)                       // bitmap bits per block

// block holding inode i, and the bitmap block holding block b's bit
#define IBLOCK(i, sb)  ((i) / IPB + (sb).inodestart)
#define BBLOCK(b, sb)  ((b) / BPB + (sb).bmapstart)
