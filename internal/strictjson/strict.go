package strictjson

// The checks encoding/json does not make, run over a JSON text before it
// decodes it (Decode: an HTTP body, a rules file; CheckJSON: claims, frames). encoding/json quietly turns invalid UTF-8 and unpaired surrogate
// escapes into U+FFFD, keeps the last of duplicate keys (so a proxy that
// reads the first sees another body than we do), and matches keys to struct
// fields case-insensitively ("TEXT", "te\u0078t", even "nic\u212a" with a
// Kelvin sign). One pass over the bytes, driven by a schema of the target
// type built once per type, refuses all of them with a message that names the
// field by its JSON path. It allocates nothing for bodies without errors
// whose objects are structs of up to 64 fields.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Codes of the errors Decode returns, as clients see them
// (internal/httpx answers them with 400).
const (
	// CodeBadJSON: the text is not one JSON value of the target's shape.
	CodeBadJSON = "bad_json"
	// CodeBadUTF8: the text is not valid UTF-8, or escapes half a
	// surrogate pair.
	CodeBadUTF8 = "bad_utf8"
)

// Error is what Decode returns for a text it refuses: a stable code and a
// message for people that names the field at fault by its JSON path.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Decode decodes data, one JSON text, into v (as json.Unmarshal), strictly:
// valid UTF-8, no half surrogate pair, one value, and in each object that
// v's type describes a member's name spelt exactly as its field's, known,
// and not repeated; type errors name the field by its JSON path and say in
// JSON's words what it takes. It is the one strict decoder: the HTTP
// binding (httpx.BindJSON) and the files parsed at load (rate-limit rules)
// both call it. It returns nil, an *Error for a text it refuses, or
// json.Unmarshal's *json.InvalidUnmarshalError when v is not a pointer
// (the caller's bug).
func Decode(data []byte, v any) error {
	if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
		return errorf(CodeBadJSON, "empty body")
	}
	if !utf8.Valid(data) {
		return errorf(CodeBadUTF8, "body is not valid UTF-8 (byte %d)", firstInvalidUTF8(data))
	}
	sc := schemaOf(reflect.TypeOf(v))
	if f := checkJSON(data, sc); f != nil {
		return f.decodeError()
	}
	// The scan has refused every key encoding/json would not match exactly,
	// so Unmarshal (which does not copy the data again, unlike a Decoder)
	// is left with type errors only.
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var (
		te *json.UnmarshalTypeError
		se *json.SyntaxError
		ie *json.InvalidUnmarshalError
	)
	switch {
	case errors.As(err, &te):
		return typeError(te, data, sc)
	case errors.As(err, &ie):
		return err
	case errors.As(err, &se):
		return errorf(CodeBadJSON, "malformed JSON at byte %d", se.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(CodeBadJSON, "truncated body")
	}
	// A field's own decoder (json.Unmarshaler) refused its value.
	return errorf(CodeBadJSON, "a field's value does not parse: %v", err)
}

// firstInvalidUTF8 is the offset of the first byte that is not UTF-8.
func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// maxJSONDepth bounds nesting: no body of ours nests beyond a handful of
// levels, and the scan recurses.
const maxJSONDepth = 64

type schemaKind uint8

const (
	// kindAny: only JSON-level checks below (interfaces, json.Unmarshalers,
	// scalars).
	kindAny schemaKind = iota
	kindStruct
	kindMap
	kindList
	// kindTime is time.Time: a JSON string in RFC 3339, checked here so that
	// the message names the field rather than the Go method that failed.
	kindTime
)

// schema is what the scan knows of a Go type: the exact JSON names of a
// struct's fields, and the schema of what a field, map or list holds.
type schema struct {
	kind   schemaKind
	fields []schemaField  // kindStruct
	index  map[string]int // kindStruct: exact JSON name → fields
	elem   *schema        // kindMap, kindList
}

type schemaField struct {
	name   string
	schema *schema
}

var (
	schemaCache     sync.Map // reflect.Type → *schema
	timeType        = reflect.TypeFor[time.Time]()
	unmarshalerType = reflect.TypeFor[json.Unmarshaler]()
)

// schemaOf returns the schema of the type v points to.
func schemaOf(t reflect.Type) *schema {
	if t == nil {
		return nil
	}
	if s, ok := schemaCache.Load(t); ok {
		return s.(*schema)
	}
	s, _ := schemaCache.LoadOrStore(t, buildSchema(t, map[reflect.Type]*schema{}))
	return s.(*schema)
}

func buildSchema(t reflect.Type, seen map[reflect.Type]*schema) *schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s, ok := seen[t]; ok {
		return s // a recursive type
	}
	s := &schema{}
	seen[t] = s
	switch {
	case t == timeType:
		s.kind = kindTime
		return s
	case reflect.PointerTo(t).Implements(unmarshalerType):
		return s // decodes itself
	}
	switch t.Kind() {
	case reflect.Struct:
		s.kind = kindStruct
		buildStruct(s, t, seen)
	case reflect.Map:
		s.kind = kindMap
		s.elem = buildSchema(t.Elem(), seen)
	case reflect.Slice, reflect.Array:
		s.kind = kindList
		s.elem = buildSchema(t.Elem(), seen)
	}
	return s
}

// buildStruct lists the JSON names encoding/json decodes into t, by its
// rules: json tags, "-" skipped, unexported fields skipped, the fields of
// untagged embedded structs promoted, a shallower field hiding deeper ones,
// and a name claimed by several fields at one depth (none or several of them
// tagged) belonging to none.
func buildStruct(s *schema, t reflect.Type, seen map[reflect.Type]*schema) {
	type candidate struct {
		name   string
		typ    reflect.Type
		tagged bool
	}
	taken := map[string]bool{}
	visited := map[reflect.Type]bool{}
	for level := []reflect.Type{t}; len(level) > 0; {
		var next []reflect.Type
		var cands []candidate
		for _, st := range level {
			if visited[st] {
				continue
			}
			visited[st] = true
			for i := range st.NumField() {
				f := st.Field(i)
				if f.Anonymous {
					et := f.Type
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if !f.IsExported() && et.Kind() != reflect.Struct {
						continue
					}
				} else if !f.IsExported() {
					continue
				}
				tag := f.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if !validTagName(name) {
					name = ""
				}
				et := f.Type
				if et.Name() == "" && et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if name == "" && f.Anonymous && et.Kind() == reflect.Struct {
					next = append(next, et)
					continue
				}
				c := candidate{name: name, typ: f.Type, tagged: name != ""}
				if !c.tagged {
					c.name = f.Name
				}
				cands = append(cands, c)
			}
		}
		for _, c := range cands {
			if taken[c.name] {
				continue
			}
			taken[c.name] = true
			var win *candidate
			n, tagged := 0, 0
			for j := range cands {
				if cands[j].name != c.name {
					continue
				}
				n++
				if cands[j].tagged {
					tagged++
					win = &cands[j]
				}
			}
			switch {
			case n == 1:
				win = &c
			case tagged != 1:
				win = nil // ambiguous: encoding/json decodes into neither
			}
			if win != nil {
				s.fields = append(s.fields, schemaField{name: win.name, schema: buildSchema(win.typ, seen)})
			}
		}
		level = next
	}
	s.index = make(map[string]int, len(s.fields))
	for i, f := range s.fields {
		s.index[f.name] = i
	}
}

// validTagName is encoding/json's rule for a usable tag name.
func validTagName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

type faultKind uint8

const (
	faultSyntax faultKind = iota
	faultTruncated
	faultTrailing
	faultDeep
	faultSurrogate
	faultUnknown
	faultCase
	faultDuplicate
	faultTime
	// faultLocated is no fault: the locating scan found its value.
	faultLocated
)

// pathElem is one step of a JSON path: an object key or an array index.
type pathElem struct {
	key   string
	index int // -1 for a key
}

// jsonFault is what the scan found wrong. path is built innermost first as
// the recursion unwinds, so a scan without faults pays nothing for it.
type jsonFault struct {
	kind   faultKind
	offset int
	rune   rune   // faultSurrogate
	hint   string // faultCase: the field name meant
	path   []pathElem
}

func (f *jsonFault) push(e pathElem) { f.path = append(f.path, e) }

// pathString renders a path as rooms[2].limits.user_burst.
func pathString(p []pathElem) string {
	var b strings.Builder
	for i := len(p) - 1; i >= 0; i-- {
		if p[i].index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(p[i].index))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p[i].key)
	}
	return b.String()
}

// where names the place a path points to in a message.
func where(p []pathElem) string {
	if len(p) == 0 {
		return "body"
	}
	return fmt.Sprintf("field %q", pathString(p))
}

func (f *jsonFault) decodeError() *Error {
	bad := func(format string, args ...any) *Error {
		return errorf(CodeBadJSON, format, args...)
	}
	switch f.kind {
	case faultTruncated:
		return bad("truncated JSON")
	case faultTrailing:
		return bad("data after the JSON value at byte %d: a body holds one JSON value", f.offset)
	case faultDeep:
		return bad("JSON nests deeper than %d levels", maxJSONDepth)
	case faultSurrogate:
		return errorf(CodeBadUTF8, "%s holds the escape \\u%04x at byte %d, half of a surrogate pair without its other half: not a character", where(f.path), f.rune, f.offset)
	case faultUnknown:
		return bad("unknown field %q", pathString(f.path))
	case faultCase:
		return bad("unknown field %q: field names are case-sensitive; did you mean %q?", pathString(f.path), f.hint)
	case faultDuplicate:
		return bad("duplicate field %q", pathString(f.path))
	case faultTime:
		return bad("%s must be a time string in RFC 3339 form, e.g. \"2026-12-24T19:00:00Z\"", where(f.path))
	}
	return bad("malformed JSON at byte %d", f.offset)
}

// jsonScanner checks one JSON text. locate, when positive, makes it a
// locator: it stops with faultLocated at the innermost value v with
// start(v) < locate <= end(v), which is how an encoding/json type error's
// offset becomes a path.
type jsonScanner struct {
	data   []byte
	i      int
	depth  int
	locate int
	// open: a struct's schema names the members it knows, not all it may
	// hold (CheckJSON of an open format): another name is passed over,
	// unless it is one of the known ones in another case.
	open bool
}

// checkJSON scans data (valid UTF-8) as one JSON value of schema sc.
func checkJSON(data []byte, sc *schema) *jsonFault {
	s := jsonScanner{data: data}
	return s.check(sc)
}

// check scans s.data as one JSON value of schema sc.
func (s *jsonScanner) check(sc *schema) *jsonFault {
	if f := s.value(sc); f != nil {
		return f
	}
	s.ws()
	if s.i < len(s.data) {
		return s.fault(faultTrailing)
	}
	return nil
}

// JSONError is what CheckJSON found wrong.
type JSONError struct {
	// Member is the JSON path of the member at fault (`role`,
	// `rooms[2].id`); empty when the fault is not one member's.
	Member string
	// Reason says what is wrong, without the member's name: "unknown",
	// "repeated", "names are case-sensitive; did you mean \"role\"?", or
	// what is wrong with the whole text.
	Reason string
	msg    string
}

// Error is the message Decode gives for the same fault.
func (e *JSONError) Error() string { return e.msg }

// CheckJSON checks data, one JSON value that arrives outside a request
// body — a ticket's claims, a WebSocket frame —, by the rules BindJSON
// applies (Decode) before it decodes one, so that no two readers of it can
// see different values: valid UTF-8, no half surrogate pair, one value, and
// in each object that v's type describes (v as given to json.Unmarshal) a
// member's name spelt exactly as its field's and no member twice. A member
// v's type does not name is refused when closed; when not (a format that
// others may extend: a JWT's claim set, a report a newer client adds
// counters to) it is passed over, unless it is one of v's names in another
// case, which encoding/json would have taken for it. Types are left to the
// decoder. It returns nil or a *JSONError, and allocates nothing for valid
// data whose objects have up to 64 known members.
func CheckJSON(data []byte, v any, closed bool) error {
	if !utf8.Valid(data) {
		return &JSONError{Reason: "not valid UTF-8", msg: fmt.Sprintf("not valid UTF-8 (byte %d)", firstInvalidUTF8(data))}
	}
	s := jsonScanner{data: data, open: !closed}
	f := s.check(schemaOf(reflect.TypeOf(v)))
	if f == nil {
		return nil
	}
	e := &JSONError{msg: f.decodeError().Message}
	e.Reason = e.msg
	switch f.kind {
	case faultUnknown:
		e.Reason = "unknown"
	case faultCase:
		e.Reason = fmt.Sprintf("names are case-sensitive; did you mean %q?", f.hint)
	case faultDuplicate:
		e.Reason = "repeated"
	}
	if f.kind == faultUnknown || f.kind == faultCase || f.kind == faultDuplicate {
		e.Member = pathString(f.path)
	}
	return e
}

// locatePath returns the path of the value an encoding/json error offset
// points into, and whether it found one.
func locatePath(data []byte, sc *schema, offset int) (string, bool) {
	if offset <= 0 {
		return "", false
	}
	s := jsonScanner{data: data, locate: offset}
	f := s.value(sc)
	if f == nil || f.kind != faultLocated {
		return "", false
	}
	return pathString(f.path), true
}

func (s *jsonScanner) fault(k faultKind) *jsonFault {
	if s.i >= len(s.data) && k == faultSyntax {
		k = faultTruncated
	}
	return &jsonFault{kind: k, offset: s.i}
}

func (s *jsonScanner) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScanner) value(sc *schema) *jsonFault {
	s.ws()
	if s.i >= len(s.data) {
		return s.fault(faultTruncated)
	}
	start := s.i
	var f *jsonFault
	c := s.data[s.i]
	switch {
	case c == '{':
		f = s.object(sc)
	case c == '[':
		f = s.array(sc)
	case c == '"':
		_, _, f = s.str()
	case c == 't':
		f = s.literal("true")
	case c == 'f':
		f = s.literal("false")
	case c == 'n':
		f = s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		f = s.number()
	default:
		f = s.fault(faultSyntax)
	}
	if f != nil {
		return f
	}
	if sc != nil && sc.kind == kindTime && c != 'n' {
		var t time.Time
		if c != '"' || t.UnmarshalJSON(s.data[start:s.i]) != nil {
			return &jsonFault{kind: faultTime, offset: start}
		}
	}
	if s.locate > start && s.locate <= s.i {
		return &jsonFault{kind: faultLocated}
	}
	return nil
}

func (s *jsonScanner) literal(lit string) *jsonFault {
	rest := s.data[s.i:]
	if len(rest) < len(lit) {
		if bytes.HasPrefix([]byte(lit), rest) {
			s.i = len(s.data)
			return s.fault(faultTruncated)
		}
		return s.fault(faultSyntax)
	}
	for j := 0; j < len(lit); j++ {
		if rest[j] != lit[j] {
			s.i += j
			return s.fault(faultSyntax)
		}
	}
	s.i += len(lit)
	return nil
}

// number accepts RFC 8259's number grammar; what follows it is the
// caller's to check.
func (s *jsonScanner) number() *jsonFault {
	d := s.data
	digits := func() bool {
		at := s.i
		for s.i < len(d) && '0' <= d[s.i] && d[s.i] <= '9' {
			s.i++
		}
		return s.i > at
	}
	if d[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i >= len(d):
		return s.fault(faultTruncated)
	case d[s.i] == '0':
		s.i++
	case !digits():
		return s.fault(faultSyntax)
	}
	if s.i < len(d) && d[s.i] == '.' {
		s.i++
		if !digits() {
			return s.fault(faultSyntax)
		}
	}
	if s.i < len(d) && (d[s.i] == 'e' || d[s.i] == 'E') {
		s.i++
		if s.i < len(d) && (d[s.i] == '+' || d[s.i] == '-') {
			s.i++
		}
		if !digits() {
			return s.fault(faultSyntax)
		}
	}
	return nil
}

// hex4 reads four hex digits at data[at:].
func (s *jsonScanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range s.data[at : at+4] {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// str scans a string and returns its raw contents (between the quotes) and
// whether it holds escapes. Bytes are valid UTF-8 already (Decode and
// CheckJSON check first); what is left is control characters, escape syntax and
// surrogate escapes that pair up.
func (s *jsonScanner) str() (raw []byte, escaped bool, f *jsonFault) {
	s.i++
	start := s.i
	d := s.data
	for s.i < len(d) {
		c := d[s.i]
		switch {
		case c == '"':
			raw = d[start:s.i]
			s.i++
			return raw, escaped, nil
		case c < 0x20:
			return nil, false, s.fault(faultSyntax)
		case c != '\\':
			s.i++
			continue
		}
		escaped = true
		if s.i+1 >= len(d) {
			s.i = len(d)
			return nil, false, s.fault(faultTruncated)
		}
		switch d[s.i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.i += 2
			continue
		case 'u':
		default:
			s.i++
			return nil, false, s.fault(faultSyntax)
		}
		r, ok := s.hex4(s.i + 2)
		if !ok {
			s.i += 2
			return nil, false, s.fault(faultSyntax)
		}
		at := s.i
		s.i += 6
		switch {
		case r >= 0xD800 && r < 0xDC00:
			if s.i+1 < len(d) && d[s.i] == '\\' && d[s.i+1] == 'u' {
				r2, ok := s.hex4(s.i + 2)
				if !ok {
					s.i += 2
					return nil, false, s.fault(faultSyntax)
				}
				if r2 >= 0xDC00 && r2 < 0xE000 {
					s.i += 6
					continue
				}
			}
			return nil, false, &jsonFault{kind: faultSurrogate, offset: at, rune: r}
		case r >= 0xDC00 && r < 0xE000:
			return nil, false, &jsonFault{kind: faultSurrogate, offset: at, rune: r}
		}
	}
	return nil, false, s.fault(faultTruncated)
}

// unescape decodes the raw contents of a string that str accepted.
func unescape(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, _ := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
			i += 6
			if r >= 0xD800 && r < 0xDC00 {
				r2, _ := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
				r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
				i += 6
			}
			out = utf8.AppendRune(out, rune(r))
			continue
		default: // '"', '\\', '/'
			out = append(out, raw[i+1])
		}
		i += 2
	}
	return out
}

// keySet finds duplicate keys in objects whose fields the schema does not
// number (maps, opaque values): a linear search over the first few keys, a
// map beyond.
type keySet struct {
	n     int
	small [8][]byte
	m     map[string]struct{}
}

// add reports whether key is new.
func (k *keySet) add(key []byte) bool {
	if k.m != nil {
		if _, dup := k.m[string(key)]; dup {
			return false
		}
		k.m[string(key)] = struct{}{}
		return true
	}
	for i := 0; i < k.n; i++ {
		if bytes.Equal(k.small[i], key) {
			return false
		}
	}
	if k.n < len(k.small) {
		k.small[k.n] = key
		k.n++
		return true
	}
	k.m = make(map[string]struct{}, 2*len(k.small))
	for _, s := range k.small {
		k.m[string(s)] = struct{}{}
	}
	k.m[string(key)] = struct{}{}
	return true
}

func (s *jsonScanner) object(sc *schema) *jsonFault {
	if s.depth++; s.depth > maxJSONDepth {
		return s.fault(faultDeep)
	}
	s.i++ // '{'
	strict := sc != nil && sc.kind == kindStruct
	var (
		seenFields uint64 // strict: the fields seen, by index, for indexes < 64
		others     keySet // every other key
	)
	s.ws()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.data) {
			return s.fault(faultTruncated)
		}
		if s.data[s.i] != '"' {
			return s.fault(faultSyntax)
		}
		keyAt := s.i
		raw, escaped, f := s.str()
		if f != nil {
			return f
		}
		key := raw
		if escaped {
			key = unescape(raw)
		}
		var child *schema
		dup := false
		if strict {
			idx, known := sc.index[string(key)]
			if !known {
				kind, hint := faultUnknown, ""
				for _, fd := range sc.fields {
					if bytes.EqualFold(key, []byte(fd.name)) { // names are short: no allocation
						kind, hint = faultCase, fd.name
						break
					}
				}
				if kind == faultCase || !s.open {
					f := &jsonFault{kind: kind, offset: keyAt, hint: hint}
					f.push(pathElem{key: string(key), index: -1})
					return f
				}
				dup = !others.add(key) // an open format's other member
			} else {
				if idx < 64 {
					dup = seenFields&(1<<idx) != 0
					seenFields |= 1 << idx
				} else {
					dup = !others.add(key)
				}
				child = sc.fields[idx].schema
			}
		} else {
			dup = !others.add(key)
			if sc != nil && sc.kind == kindMap {
				child = sc.elem
			}
		}
		if dup {
			f := &jsonFault{kind: faultDuplicate, offset: keyAt}
			f.push(pathElem{key: string(key), index: -1})
			return f
		}
		s.ws()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return s.fault(faultSyntax)
		}
		s.i++
		if f := s.value(child); f != nil {
			f.push(pathElem{key: string(key), index: -1})
			return f
		}
		s.ws()
		if s.i >= len(s.data) {
			return s.fault(faultTruncated)
		}
		switch s.data[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.fault(faultSyntax)
		}
	}
}

func (s *jsonScanner) array(sc *schema) *jsonFault {
	if s.depth++; s.depth > maxJSONDepth {
		return s.fault(faultDeep)
	}
	s.i++ // '['
	var elem *schema
	if sc != nil && sc.kind == kindList {
		elem = sc.elem
	}
	s.ws()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for n := 0; ; n++ {
		if f := s.value(elem); f != nil {
			f.push(pathElem{index: n})
			return f
		}
		s.ws()
		if s.i >= len(s.data) {
			return s.fault(faultTruncated)
		}
		switch s.data[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.fault(faultSyntax)
		}
	}
}

// jsonType says in JSON's words what a Go type takes, for messages that
// must not name Go types.
func jsonType(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == timeType {
		return "a time string in RFC 3339 form"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		return fmt.Sprintf("a whole number from %d to %d", -(int64(1) << (bits - 1)), int64(1)<<(bits-1)-1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<t.Bits()-1)
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return fmt.Sprintf("an array of %d", t.Len())
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another JSON value"
}

// typeError turns an encoding/json type error into a message in JSON's
// words, naming the field by its full path where the offset finds it.
func typeError(te *json.UnmarshalTypeError, data []byte, sc *schema) *Error {
	path, ok := locatePath(data, sc, int(te.Offset))
	if !ok {
		path = te.Field
	}
	got := te.Value
	if len(got) > 40 {
		got = got[:40] + "…"
	}
	place := "body"
	if path != "" {
		place = fmt.Sprintf("field %q", path)
	}
	return errorf(CodeBadJSON, "%s must be %s (got %s)", place, jsonType(te.Type), got)
}
