// fs.h: the on-disk file system format, shared by the kernel (fs.c) and the
// host image builder (harness/fsimage.py parses the #defines and structs
// below; never retype them there). Keep each object-like #define an integer
// expression of earlier names and sizeof(struct ...), and struct fields of
// the types in types.h, so the parser can read them.
//
// Disk layout, in BSIZE blocks:
//   [ boot block | super block | inode blocks | free bit map | data blocks ]
// Block 0 is unused; block 1 holds struct superblock. There is no log: every
// change is written through to disk at once (a crash can leave the image
// inconsistent; the harness never crashes the guest mid-write on purpose).

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

struct superblock {
  uint magic;           // FSMAGIC
  uint size;            // size of the image in blocks
  uint nblocks;         // number of data blocks
  uint ninodes;         // number of inodes
  uint inodestart;      // block number of the first inode block
  uint bmapstart;       // block number of the first free-map block
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
