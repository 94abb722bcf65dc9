package flows

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/ovsflow/ovs-cni/pkg/openflow"
)

// Cookie is an OpenFlow cookie laid out as declared in pipeline.go.
type Cookie uint64

// AttachmentCookie returns the cookie of every flow of one attachment.
func AttachmentCookie(containerID, ifname string) Cookie {
	h := fnv.New64a()
	h.Write([]byte(containerID + "/" + ifname))
	return CookieSuite | Cookie(CookieKindAttachment)<<CookieKindShift | Cookie(h.Sum64())&CookieHashMask
}

// SharedCookie returns the cookie of the flows shared by all attachments.
func SharedCookie() Cookie {
	return CookieSuite | Cookie(CookieKindShared)<<CookieKindShift
}

// IsOurs reports whether c carries this pipeline's suite tag.
func (c Cookie) IsOurs() bool { return c&SuiteMask == CookieSuite }

// Kind returns CookieKindShared or CookieKindAttachment (or another value for
// a cookie that is not ours).
func (c Cookie) Kind() uint8 { return uint8(c >> CookieKindShift) }

// String renders the cookie as ovs-ofctl prints it: 0x%016x.
func (c Cookie) String() string { return fmt.Sprintf("0x%016x", uint64(c)) }

// MarshalText renders c as String does, for the records that hold it.
func (c Cookie) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses a cookie in hex after "0x", as String renders it.
func (c *Cookie) UnmarshalText(b []byte) error {
	hex, ok := strings.CutPrefix(string(b), "0x")
	v, err := strconv.ParseUint(hex, 16, 64)
	if !ok || err != nil {
		return fmt.Errorf("cookie %q: not 0x and at most 16 hex digits", b)
	}
	*c = Cookie(v)
	return nil
}

// Delete selects every flow with exactly this cookie, in every table.
func (c Cookie) Delete() openflow.Delete { return openflow.Delete{Cookie: uint64(c), Mask: ^uint64(0)} }

// SuiteDelete selects every flow of this pipeline, shared and per
// attachment.
func SuiteDelete() openflow.Delete {
	return openflow.Delete{Cookie: uint64(CookieSuite), Mask: uint64(SuiteMask)}
}

// WithKind returns the cookie with another kind and the same attachment hash.
func (c Cookie) WithKind(k uint8) Cookie {
	return c&^(Cookie(0xff)<<CookieKindShift) | Cookie(k)<<CookieKindShift
}

// AnyKind returns the cookie value and mask that select every flow of the
// attachment of c, any kind.
func (c Cookie) AnyKind() (value, mask Cookie) {
	return c &^ (Cookie(0xff) << CookieKindShift), AttachmentMask
}

// AttachmentDelete selects every flow of the attachment of c, any kind.
func (c Cookie) AttachmentDelete() openflow.Delete {
	v, m := c.AnyKind()
	return openflow.Delete{Cookie: uint64(v), Mask: uint64(m)}
}
