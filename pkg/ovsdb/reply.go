package ovsdb

import (
	"encoding/json"
	"fmt"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// transactReply is the result of a transact request (RFC 7047 section
// 4.1.3): one libovsdb OperationResult per operation (the zero one for
// those not run after one that failed), and one more with the error when
// the commit failed, read by encoding/json through libovsdb's Row, UUID,
// OvsSet and OvsMap. Those index and assert on what they read, so a
// malformed answer (a row {"x":[]}) can panic inside them: the panic is
// turned into an error, so that a broken or hostile answer is an error,
// never a crash. A value of a form the models do not take is decode's
// error.
type transactReply []ovsdb.OperationResult

func (r *transactReply) UnmarshalJSON(b []byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed transact reply: %v", p)
		}
	}()
	var res []ovsdb.OperationResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("malformed transact reply: %w", err)
	}
	*r = res
	return nil
}

// resultErr is the error of an operation's (or the commit's) result, nil
// when it succeeded.
func resultErr(r ovsdb.OperationResult) error {
	if r.Error == "" {
		return nil
	}
	return errorOf(r.Error, r.Details)
}
