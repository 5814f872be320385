package loadtable

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A node's report is stored as one short line of text rather than JSON:
// every allocator decodes every changed report every 5 ms, and at a
// thousand nodes a JSON decode (4–5 µs with its time.Time) alone would take
// the whole sync budget. The line is
//
//	v1|kind|at-ms|conns|capacity|cpu|draining|line|region|addr
//
// kind is "e" or "i", at-ms the report's time in Unix milliseconds, cpu a
// decimal fraction, draining "0" or "1"; line and region may be empty and
// hold no "|"; addr comes last and may hold anything. A reader refuses a
// record of another version rather than misread it.
const recordVersion = "v1"

// errBadRecord is what decodeRecord returns for a field it cannot read.
var errBadRecord = errors.New("loadtable: bad load record")

// encodeRecord appends l's record to b.
func encodeRecord(b []byte, l *NodeLoad) ([]byte, error) {
	kind := ""
	switch l.Kind {
	case KindEdge:
		kind = "e"
	case KindIngest:
		kind = "i"
	default:
		return b, fmt.Errorf("%w: kind %q", errBadRecord, l.Kind)
	}
	if strings.ContainsRune(l.Line, '|') || strings.ContainsRune(l.Region, '|') {
		return b, fmt.Errorf("%w: line or region holds '|'", errBadRecord)
	}
	if l.Conns < 0 || l.Capacity < 0 {
		return b, fmt.Errorf("%w: negative conns or capacity", errBadRecord)
	}
	b = append(b, recordVersion...)
	b = append(b, '|')
	b = append(b, kind...)
	b = append(b, '|')
	b = strconv.AppendInt(b, l.At.UnixMilli(), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(l.Conns), 10)
	b = append(b, '|')
	b = strconv.AppendInt(b, int64(l.Capacity), 10)
	b = append(b, '|')
	b = strconv.AppendFloat(b, l.CPU, 'f', -1, 64)
	if l.Draining {
		b = append(b, "|1|"...)
	} else {
		b = append(b, "|0|"...)
	}
	b = append(b, l.Line...)
	b = append(b, '|')
	b = append(b, l.Region...)
	b = append(b, '|')
	b = append(b, l.Addr...)
	return b, nil
}

// decodeRecord reads the record of node id.
func decodeRecord(id, s string) (NodeLoad, error) {
	l := NodeLoad{ID: id}
	var f [9]string
	for i := range f {
		var ok bool
		f[i], s, ok = strings.Cut(s, "|")
		if !ok {
			return NodeLoad{}, fmt.Errorf("%w: %d fields, want 10", errBadRecord, i+1)
		}
	}
	if f[0] != recordVersion {
		return NodeLoad{}, fmt.Errorf("%w: version %.8q", errBadRecord, f[0])
	}
	switch f[1] {
	case "e":
		l.Kind = KindEdge
	case "i":
		l.Kind = KindIngest
	default:
		return NodeLoad{}, fmt.Errorf("%w: kind %.8q", errBadRecord, f[1])
	}
	at, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return NodeLoad{}, fmt.Errorf("%w: time", errBadRecord)
	}
	l.At = time.UnixMilli(at)
	conns, err1 := strconv.Atoi(f[3])
	capacity, err2 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil || conns < 0 || capacity < 0 {
		return NodeLoad{}, fmt.Errorf("%w: conns or capacity", errBadRecord)
	}
	l.Conns, l.Capacity = conns, capacity
	cpu, err := strconv.ParseFloat(f[5], 64)
	// NaN fails every comparison, so a NaN CPU would look idle forever.
	if err != nil || cpu != cpu || cpu < 0 {
		return NodeLoad{}, fmt.Errorf("%w: cpu", errBadRecord)
	}
	l.CPU = cpu
	switch f[6] {
	case "0":
	case "1":
		l.Draining = true
	default:
		return NodeLoad{}, fmt.Errorf("%w: draining", errBadRecord)
	}
	l.Line, l.Region, l.Addr = f[7], f[8], s
	return l, nil
}
