package flows

// The cookie matches as del-flows and dump-flows read them, for this
// package's tests; other tests render the openflow.Delete themselves.

// Match renders Delete's cookie match.
func (c Cookie) Match() string { return c.Delete().String() }

// SuiteMatch renders SuiteDelete's cookie match.
func SuiteMatch() string { return SuiteDelete().String() }

// AttachmentMatch renders AttachmentDelete's cookie match.
func (c Cookie) AttachmentMatch() string { return c.AttachmentDelete().String() }
