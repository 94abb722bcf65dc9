package ovsdb

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// The answer to a transact request (RFC 7047 section 4.1.3), read straight
// into what the package uses of it: per operation the count, the inserted
// row's UUID, the selected rows, or the error. The whole answer is checked
// against the grammar of OVSDB values (section 5.1) as it is read, so that
// a broken or hostile answer is an error, never a crash; the rows' values
// stay in wire form until decode turns the columns of a model into its
// fields.

// An opResult is one operation's result.
type opResult struct {
	count int         // rows updated, mutated or deleted
	uuid  string      // the inserted row's
	rows  []resultRow // selected
	err   error       // the operation's error, nil when it succeeded
}

// A resultRow is one selected row: its columns, with their values checked
// and still in wire form.
type resultRow []resultCell

type resultCell struct {
	column []byte // unquoted
	datum  []byte // the value's JSON text
}

// transactReply is the result of a transact request: one element per
// operation (null for those not run after one that failed), and one more
// with the error when the commit failed.
type transactReply []opResult

func (r *transactReply) UnmarshalJSON(b []byte) error {
	res, err := parseTransactReply(b)
	if err != nil {
		return fmt.Errorf("malformed transact reply: %w", err)
	}
	*r = res
	return nil
}

func parseTransactReply(b []byte) (transactReply, error) {
	rd := replyReader{scanner: scanner{b: b},
		// A column takes 30 bytes and more on the wire.
		cells: make([]resultCell, 0, len(b)/32), atoms: make([]atom, 0, 16)}
	if err := rd.expect('['); err != nil {
		return nil, err
	}
	var out transactReply
	if !rd.eat(']') {
		for {
			var r opResult
			if rd.eat('n') {
				if err := rd.rest("ull"); err != nil {
					return nil, err
				}
			} else if err := rd.opResult(&r); err != nil {
				return nil, fmt.Errorf("result %d: %w", len(out)+1, err)
			}
			out = append(out, r)
			if rd.eat(',') {
				continue
			}
			if err := rd.expect(']'); err != nil {
				return nil, err
			}
			break
		}
	}
	if rd.space(); rd.i < len(rd.b) {
		return nil, rd.errorf("got %s after the result", rd.found())
	}
	return out, nil
}

// A replyReader reads one answer.
type replyReader struct {
	scanner
	cells []resultCell // of every row of the answer
	atoms []atom       // scratch
}

// opResult reads one result object into r. Members outside RFC 7047's
// (ovsdb-server adds "syntax" to some errors) are skipped.
func (rd *replyReader) opResult(r *opResult) error {
	if err := rd.expect('{'); err != nil {
		return err
	}
	var tag, details string
	hasError := false
	if !rd.eat('}') {
		for {
			raw, esc, err := rd.member()
			if err != nil {
				return err
			}
			key := unquoteBytes(raw, esc)
			switch string(key) {
			case "count":
				var a atom
				if a, err = rd.atom(); err == nil {
					r.count, err = atomInt(a)
				}
			case "uuid":
				var a atom
				if a, err = rd.atom(); err == nil {
					if a.kind != kindUUID {
						err = fmt.Errorf("got %s, want a UUID", a.kind)
					} else {
						r.uuid, err = atomString(a)
					}
				}
			case "rows":
				err = rd.rows(r)
			case "error":
				hasError = true
				tag, err = rd.string()
			case "details":
				details, err = rd.string()
			default:
				err = rd.skip(0)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if rd.eat(',') {
				continue
			}
			if err := rd.expect('}'); err != nil {
				return err
			}
			break
		}
	}
	if hasError {
		r.err = errorOf(tag, details)
	}
	return nil
}

// rows reads an array of rows into r.rows.
func (rd *replyReader) rows(r *opResult) error {
	if err := rd.expect('['); err != nil {
		return err
	}
	r.rows = []resultRow{}
	if rd.eat(']') {
		return nil
	}
	for {
		if err := rd.expect('{'); err != nil {
			return err
		}
		start := len(rd.cells)
		if !rd.eat('}') {
			for {
				col, esc, err := rd.member()
				if err != nil {
					return err
				}
				from := rd.pos()
				if _, rd.atoms, err = rd.datum(rd.atoms[:0]); err != nil {
					return fmt.Errorf("row %d: column %s: %w", len(r.rows)+1, col, err)
				}
				rd.cells = append(rd.cells, resultCell{column: unquoteBytes(col, esc), datum: rd.b[from:rd.i]})
				if rd.eat(',') {
					continue
				}
				if err := rd.expect('}'); err != nil {
					return err
				}
				break
			}
		}
		// Capped, so that an append to a row cannot write over the next.
		r.rows = append(r.rows, rd.cells[start:len(rd.cells):len(rd.cells)])
		if rd.eat(',') {
			continue
		}
		return rd.expect(']')
	}
}

// The scanner reads the JSON of an answer: only the forms RFC 7047 allows
// where it expects a value, anything well-formed in members it skips.
type scanner struct {
	b []byte
	i int
}

// maxDepth bounds the nesting of skipped members.
const maxDepth = 64

func (s *scanner) pos() int {
	s.space()
	return s.i
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (s *scanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scanner) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) expect(c byte) error {
	if !s.eat(c) {
		return s.errorf("got %s, want %q", s.found(), c)
	}
	return nil
}

// rest reads the rest of a literal.
func (s *scanner) rest(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.errorf("got %s, want a value", s.found())
	}
	s.i += len(lit)
	return nil
}

func (s *scanner) found() string {
	if s.i >= len(s.b) {
		return "the end"
	}
	return strconv.QuoteRune(rune(s.b[s.i]))
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: "+format, append([]any{s.i}, args...)...)
}

// member reads an object member's name, as rawString does, and the colon
// after it.
func (s *scanner) member() (raw []byte, esc bool, err error) {
	if raw, esc, err = s.rawString(); err == nil {
		err = s.expect(':')
	}
	return raw, esc, err
}

// rawString reads a string and returns its JSON text, quotes included, and
// whether it needs more than dropping the quotes to unquote (an escape, a
// byte outside ASCII).
func (s *scanner) rawString() (raw []byte, esc bool, err error) {
	if s.peek() != '"' {
		return nil, false, s.errorf("got %s, want a string", s.found())
	}
	start := s.i
	for s.i++; s.i < len(s.b); {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start:s.i], esc, nil
		case c == '\\':
			esc = true
			if s.i+1 >= len(s.b) {
				s.i++
				return nil, false, s.errorf("unterminated string")
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if s.i+6 > len(s.b) || !isHex(s.b[s.i+2:s.i+6]) {
					return nil, false, s.errorf("invalid \\u escape")
				}
				s.i += 6
			default:
				return nil, false, s.errorf("invalid escape")
			}
		case c < 0x20:
			return nil, false, s.errorf("control character in a string")
		default:
			if c >= 0x80 {
				esc = true
			}
			s.i++
		}
	}
	return nil, false, s.errorf("unterminated string")
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// string reads a string.
func (s *scanner) string() (string, error) {
	raw, esc, err := s.rawString()
	if err != nil {
		return "", err
	}
	return unquote(raw, esc)
}

// unquote returns the string that raw, a string's JSON text checked by
// rawString, stands for; what encoding/json makes of it when it needs more
// than dropping the quotes (invalid UTF-8 becomes U+FFFD).
func unquote(raw []byte, esc bool) (string, error) {
	if !esc {
		return string(raw[1 : len(raw)-1]), nil
	}
	var str string
	err := json.Unmarshal(raw, &str)
	return str, err
}

func unquoteBytes(raw []byte, esc bool) []byte {
	if !esc {
		return raw[1 : len(raw)-1]
	}
	str, _ := unquote(raw, esc)
	return []byte(str)
}

// number reads a number and returns its text.
func (s *scanner) number() ([]byte, error) {
	s.space()
	start := s.i
	digits := func() bool {
		n := s.i
		for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
			s.i++
		}
		return s.i > n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case !digits():
		return nil, s.errorf("got %s, want a digit", s.found())
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !digits() {
			return nil, s.errorf("got %s, want a digit", s.found())
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !digits() {
			return nil, s.errorf("got %s, want a digit", s.found())
		}
	}
	return s.b[start:s.i], nil
}

// skip reads any JSON value.
func (s *scanner) skip(depth int) error {
	if depth > maxDepth {
		return s.errorf("nested deeper than %d", maxDepth)
	}
	switch c := s.peek(); {
	case c == '"':
		_, _, err := s.rawString()
		return err
	case c == '{' || c == '[':
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		s.i++
		if s.eat(end) {
			return nil
		}
		for {
			if c == '{' {
				if _, _, err := s.member(); err != nil {
					return err
				}
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			if s.eat(',') {
				continue
			}
			return s.expect(end)
		}
	case c == 't':
		s.i++
		return s.rest("rue")
	case c == 'f':
		s.i++
		return s.rest("alse")
	case c == 'n':
		s.i++
		return s.rest("ull")
	default:
		_, err := s.number()
		return err
	}
}

// An atom is one atom of a value as it is on the wire.
type atom struct {
	kind atomKind
	raw  []byte // a string's (or a UUID's) JSON text, a number's text
	esc  bool   // raw needs unquoting (see rawString)
}

type atomKind uint8

const (
	kindString atomKind = iota + 1
	kindNumber
	kindBoolean
	kindUUID // ["uuid", u] or ["named-uuid", n]
)

func (k atomKind) String() string {
	switch k {
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBoolean:
		return "a boolean"
	case kindUUID:
		return "a UUID"
	}
	return "nothing"
}

// atom reads an atom: a string, a number, a boolean or a UUID.
func (s *scanner) atom() (atom, error) {
	switch c := s.peek(); {
	case c == '"':
		raw, esc, err := s.rawString()
		return atom{kind: kindString, raw: raw, esc: esc}, err
	case c == '-' || '0' <= c && c <= '9':
		raw, err := s.number()
		return atom{kind: kindNumber, raw: raw}, err
	case c == 't' || c == 'f':
		start := s.i
		s.i++
		rest := "rue"
		if c == 'f' {
			rest = "alse"
		}
		err := s.rest(rest)
		return atom{kind: kindBoolean, raw: s.b[start:s.i]}, err
	case c == '[':
		s.i++
		tag, _, err := s.rawString()
		if err != nil {
			return atom{}, err
		}
		if t := string(tag); t != `"uuid"` && t != `"named-uuid"` {
			return atom{}, fmt.Errorf("got [%s, ...], want an atom", tag)
		}
		if err := s.expect(','); err != nil {
			return atom{}, err
		}
		raw, esc, err := s.rawString()
		if err != nil {
			return atom{}, err
		}
		return atom{kind: kindUUID, raw: raw, esc: esc}, s.expect(']')
	}
	return atom{}, s.errorf("got %s, want an atom", s.found())
}

// A datum is a column's value: an atom, a set or a map. Its atoms are the
// atom, the set's elements, or the map's keys and values in turn.
type datum struct {
	kind  datumKind
	atoms []atom
}

type datumKind uint8

const (
	datumAtom datumKind = iota + 1
	datumSet
	datumMap
)

func (d datum) String() string {
	switch d.kind {
	case datumSet:
		return "a set"
	case datumMap:
		return "a map"
	case datumAtom:
		return d.atoms[0].kind.String()
	}
	return "nothing"
}

// datum reads a value, appending its atoms to atoms.
func (s *scanner) datum(atoms []atom) (datum, []atom, error) {
	if s.peek() != '[' {
		a, err := s.atom()
		atoms = append(atoms, a)
		return datum{kind: datumAtom, atoms: atoms}, atoms, err
	}
	start := s.i
	s.i++
	tag, _, err := s.rawString()
	if err != nil {
		return datum{}, atoms, s.errorf("got %s, want an atom, a set or a map", s.found())
	}
	kind := datumSet
	switch string(tag) {
	case `"uuid"`, `"named-uuid"`:
		s.i = start
		a, err := s.atom()
		atoms = append(atoms, a)
		return datum{kind: datumAtom, atoms: atoms}, atoms, err
	case `"set"`:
	case `"map"`:
		kind = datumMap
	default:
		return datum{}, atoms, fmt.Errorf("got [%s, ...], want an atom, a set or a map", tag)
	}
	if err := s.expect(','); err != nil {
		return datum{}, atoms, err
	}
	if err := s.expect('['); err != nil {
		return datum{}, atoms, err
	}
	if !s.eat(']') {
		for {
			if kind == datumMap {
				if err := s.expect('['); err != nil {
					return datum{}, atoms, err
				}
			}
			a, err := s.atom()
			if err != nil {
				return datum{}, atoms, err
			}
			atoms = append(atoms, a)
			if kind == datumMap {
				if err := s.expect(','); err != nil {
					return datum{}, atoms, err
				}
				if a, err = s.atom(); err != nil {
					return datum{}, atoms, err
				}
				atoms = append(atoms, a)
				if err := s.expect(']'); err != nil {
					return datum{}, atoms, err
				}
			}
			if s.eat(',') {
				continue
			}
			if err := s.expect(']'); err != nil {
				return datum{}, atoms, err
			}
			break
		}
	}
	return datum{kind: kind, atoms: atoms}, atoms, s.expect(']')
}
