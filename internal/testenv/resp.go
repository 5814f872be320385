package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// respError is an error reply ("-ERR ...", "-MOVED ...") from Redis.
type respError string

func (e respError) Error() string { return string(e) }

// redisDo sends one command to addr on a fresh connection and returns its
// decoded reply: string (simple or bulk), int64, nil (null), []any, or a
// respError as the error. testenv speaks RESP itself, as redisPing does, so
// that it needs no client library (and redisx's tests, which use testenv,
// cannot end up in an import cycle).
func redisDo(addr string, timeout time.Duration, args ...string) (any, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(b.Bytes()); err != nil {
		return nil, err
	}
	return readRESP(bufio.NewReader(c))
}

// redisString is redisDo for commands that answer a string.
func redisString(addr string, timeout time.Duration, args ...string) (string, error) {
	v, err := redisDo(addr, timeout, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s answered %T, want a string", args[0], v)
	}
	return s, nil
}

func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty RESP line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, respError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			// An element that is an error reply is kept as a value, not
			// returned: the rest of the array must still be read.
			v, err := readRESP(r)
			if re, ok := err.(respError); ok {
				v, err = re, nil
			}
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected RESP line %q", line)
}

// infoField returns field's value in an INFO or CLUSTER INFO answer
// ("field:value" lines), "" if absent.
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return v
		}
	}
	return ""
}
