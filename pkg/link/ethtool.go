package link

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtool ioctl commands (linux/ethtool.h).
const (
	ethtoolSTXCSUM = 0x00000017
)

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

func ethtool(ifname string, cmd, data uint32) (uint32, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	v := ethtoolValue{cmd: cmd, data: data}
	var req ifreqData
	copy(req.name[:], ifname)
	req.data = uintptr(unsafe.Pointer(&v))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return 0, errno
	}
	return v.data, nil
}

// DisableTxChecksum is `ethtool -K IF tx off`, done with the ioctl instead of an
// exec. Open vSwitch's userspace datapath reads veth frames through AF_PACKET
// and would see TCP checksums that were never filled in; its conntrack then
// marks the packets invalid and TCP silently fails.
func DisableTxChecksum(ifname string) error {
	if _, err := ethtool(ifname, ethtoolSTXCSUM, 0); err != nil {
		return fmt.Errorf("turning tx checksum offload off on %q: %w", ifname, err)
	}
	return nil
}
