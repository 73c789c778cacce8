// virtio.h: the virtio-mmio (version 2, "modern") register interface and the
// split-virtqueue structures, as the virtio 1.1 spec defines them.
//
// Shared with the harness (harness/devices/virtio_*.py read the offsets and
// bits below; never retype them). Every register is 32 bits wide; 64-bit
// addresses are written as two halves (_LOW then _HIGH). Keep one
// "#define NAME value" per line so the harness parser can read it.

// MMIO register offsets from VIRTIO0 / VIRTIO1
#define VIRTIO_MMIO_MAGIC_VALUE         0x000 // r: 0x74726976 ("virt")
#define VIRTIO_MMIO_VERSION             0x004 // r: 2
#define VIRTIO_MMIO_DEVICE_ID           0x008 // r: VIRTIO_ID_*
#define VIRTIO_MMIO_VENDOR_ID           0x00c // r
#define VIRTIO_MMIO_DEVICE_FEATURES     0x010 // r: 32 bits selected below
#define VIRTIO_MMIO_DEVICE_FEATURES_SEL 0x014 // w: which 32 feature bits
#define VIRTIO_MMIO_DRIVER_FEATURES     0x020 // w
#define VIRTIO_MMIO_DRIVER_FEATURES_SEL 0x024 // w
#define VIRTIO_MMIO_QUEUE_SEL           0x030 // w: select a queue
#define VIRTIO_MMIO_QUEUE_NUM_MAX       0x034 // r: max size of that queue
#define VIRTIO_MMIO_QUEUE_NUM           0x038 // w: size the driver uses
#define VIRTIO_MMIO_QUEUE_READY         0x044 // rw: 1 = queue live
#define VIRTIO_MMIO_QUEUE_NOTIFY        0x050 // w: queue number with new work
#define VIRTIO_MMIO_INTERRUPT_STATUS    0x060 // r: VIRTIO_INT_*
#define VIRTIO_MMIO_INTERRUPT_ACK       0x064 // w: clear those bits
#define VIRTIO_MMIO_STATUS              0x070 // rw: VIRTIO_STATUS_*; 0 resets
#define VIRTIO_MMIO_QUEUE_DESC_LOW      0x080 // w: physical address of desc[]
#define VIRTIO_MMIO_QUEUE_DESC_HIGH     0x084 // w
#define VIRTIO_MMIO_DRIVER_DESC_LOW     0x090 // w: physical address of avail
#define VIRTIO_MMIO_DRIVER_DESC_HIGH    0x094 // w
#define VIRTIO_MMIO_DEVICE_DESC_LOW     0x0a0 // w: physical address of used
#define VIRTIO_MMIO_DEVICE_DESC_HIGH    0x0a4 // w
#define VIRTIO_MMIO_CONFIG_GENERATION   0x0fc // r
#define VIRTIO_MMIO_CONFIG              0x100 // rw: device-specific config

#define VIRTIO_MAGIC                    0x74726976
#define VIRTIO_VERSION                  2
#define VIRTIO_ID_BLOCK                 2

// status register bits
#define VIRTIO_STATUS_ACKNOWLEDGE       1
#define VIRTIO_STATUS_DRIVER            2
#define VIRTIO_STATUS_DRIVER_OK         4
#define VIRTIO_STATUS_FEATURES_OK       8
#define VIRTIO_STATUS_FAILED            128

// interrupt status bits
#define VIRTIO_INT_USED_RING            1
#define VIRTIO_INT_CONFIG               2

// feature bits: the block driver needs VIRTIO_BLK_F_FLUSH (the log orders
// its writes with flushes) and refuses the others (all others are left off)
#define VIRTIO_BLK_F_RO                 5
#define VIRTIO_BLK_F_SCSI               7
#define VIRTIO_BLK_F_FLUSH              9
#define VIRTIO_BLK_F_CONFIG_WCE         11
#define VIRTIO_BLK_F_MQ                 12
#define VIRTIO_F_ANY_LAYOUT             27
#define VIRTIO_RING_F_INDIRECT_DESC     28
#define VIRTIO_RING_F_EVENT_IDX         29
#define VIRTIO_F_VERSION_1              32

// block device config space: capacity in 512-byte sectors at CONFIG + 0
#define VIRTIO_BLK_CONFIG_CAPACITY      0x100
#define VIRTIO_BLK_SECTOR               512

// descriptors per virtqueue used by our drivers (a power of two)
#define VIRTIO_NUM                      8

// one descriptor
#define VRING_DESC_F_NEXT               1 // chained with another descriptor
#define VRING_DESC_F_WRITE              2 // device writes (vs reads)

struct virtq_desc {
  uint64 addr;          // physical address of the buffer
  uint32 len;           // its length in bytes
  uint16 flags;         // VRING_DESC_F_*
  uint16 next;          // index of the next descriptor when F_NEXT
};

// the driver's ring of descriptor chains it offers
struct virtq_avail {
  uint16 flags;                 // always zero
  uint16 idx;                   // driver writes ring[idx] next
  uint16 ring[VIRTIO_NUM];      // head descriptor numbers
  uint16 unused;
};

// the device's ring of completed chains
struct virtq_used_elem {
  uint32 id;                    // head index of the completed chain
  uint32 len;                   // bytes the device wrote
};

struct virtq_used {
  uint16 flags;                 // always zero
  uint16 idx;                   // device increments after adding a ring[] entry
  struct virtq_used_elem ring[VIRTIO_NUM];
};

// block request: the header (device reads), data, then one status byte
// (device writes)
#define VIRTIO_BLK_T_IN                 0 // read the disk
#define VIRTIO_BLK_T_OUT                1 // write the disk
#define VIRTIO_BLK_T_FLUSH              4 // every write completed before is on the disk
#define VIRTIO_BLK_S_OK                 0
#define VIRTIO_BLK_S_IOERR              1
#define VIRTIO_BLK_S_UNSUPP             2

struct virtio_blk_req {
  uint32 type;                  // VIRTIO_BLK_T_IN, _OUT or _FLUSH
  uint32 reserved;
  uint64 sector;                // 512-byte sector number
};
