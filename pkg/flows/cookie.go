package flows

import (
	"fmt"
	"hash/fnv"
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

// Match renders an exact cookie match for del-flows and dump-flows.
func (c Cookie) Match() string { return "cookie=" + c.String() + "/-1" }

// SuiteMatch renders a cookie match selecting every flow of this pipeline,
// shared and per attachment, for dump-flows.
func SuiteMatch() string {
	return "cookie=" + CookieSuite.String() + "/" + SuiteMask.String()
}

// WithKind returns the cookie with another kind and the same attachment hash.
func (c Cookie) WithKind(k uint8) Cookie {
	return c&^(Cookie(0xff)<<CookieKindShift) | Cookie(k)<<CookieKindShift
}

// Attachment returns the cookie value and mask that select every flow of the
// attachment, any kind.
func (c Cookie) Attachment() (value, mask Cookie) {
	return c &^ (Cookie(0xff) << CookieKindShift), AttachmentMask
}

// AttachmentMatch renders Attachment as a del-flows and dump-flows match.
func (c Cookie) AttachmentMatch() string {
	v, m := c.Attachment()
	return "cookie=" + v.String() + "/" + m.String()
}
