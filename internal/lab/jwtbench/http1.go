package jwtbench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http/httputil"
	"strconv"
)

// The simulator speaks HTTP/1.1 itself: thousands of devices share the hub's machine,
// and net/http's client allocates a header map and more per answer. Only what the
// hub sends is understood: a status line, headers, a body framed by Content-Length or
// chunked.

// maxAnswer bounds an answer's body (the hub's are a few hundred bytes).
const maxAnswer = 1 << 16

// appendRequest appends one POST of a JSON body to buf.
func appendRequest(buf []byte, path, host, bearer string, closing bool, body []byte) []byte {
	buf = append(buf, "POST "...)
	buf = append(buf, path...)
	buf = append(buf, " HTTP/1.1\r\nHost: "...)
	buf = append(buf, host...)
	buf = append(buf, "\r\nContent-Type: application/json\r\n"...)
	if bearer != "" {
		buf = append(buf, "Authorization: Bearer "...)
		buf = append(buf, bearer...)
		buf = append(buf, "\r\n"...)
	}
	if closing {
		buf = append(buf, "Connection: close\r\n"...)
	}
	buf = append(buf, "Content-Length: "...)
	buf = strconv.AppendInt(buf, int64(len(body)), 10)
	buf = append(buf, "\r\n\r\n"...)
	return append(buf, body...)
}

var errAnswer = errors.New("malformed HTTP answer")

// readAnswer reads one answer from br into body[:0]; closing reports that the hub
// closes the connection after it.
func readAnswer(br *bufio.Reader, body []byte) (code int, out []byte, closing bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, nil, false, err
	}
	// "HTTP/1.1 201 Created\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errAnswer, trimEOL(line))
	}
	code, err = strconv.Atoi(string(line[9:12]))
	if err != nil || code < 100 {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errAnswer, trimEOL(line))
	}
	closing = line[7] == '0' // HTTP/1.0 closes unless told otherwise
	length, chunked := -1, false
	for range 100 {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return 0, nil, false, err
		}
		h := trimEOL(line)
		if len(h) == 0 {
			return finishAnswer(br, body, code, length, chunked, closing)
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, nil, false, fmt.Errorf("%w: header %q", errAnswer, h)
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			n, err := strconv.Atoi(string(v))
			if err != nil || n < 0 || n > maxAnswer {
				return 0, nil, false, fmt.Errorf("%w: Content-Length %q", errAnswer, v)
			}
			length = n
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			closing = bytes.EqualFold(v, []byte("close"))
		}
	}
	return 0, nil, false, fmt.Errorf("%w: too many headers", errAnswer)
}

func finishAnswer(br *bufio.Reader, body []byte, code, length int, chunked, closing bool) (int, []byte, bool, error) {
	switch {
	case chunked:
		b, err := io.ReadAll(io.LimitReader(httputil.NewChunkedReader(br), maxAnswer+1))
		if err != nil {
			return 0, nil, false, err
		}
		if len(b) > maxAnswer {
			return 0, nil, false, fmt.Errorf("%w: body over %d bytes", errAnswer, maxAnswer)
		}
		// The trailer section ends with an empty line.
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return 0, nil, false, err
			}
			if len(trimEOL(line)) == 0 {
				break
			}
		}
		return code, append(body[:0], b...), closing, nil
	case length >= 0:
		if cap(body) < length {
			body = make([]byte, length)
		}
		body = body[:length]
		if _, err := io.ReadFull(br, body); err != nil {
			return 0, nil, false, err
		}
		return code, body, closing, nil
	case code == 204 || code == 304 || code < 200:
		return code, body[:0], closing, nil
	}
	// No framing: the body runs to the end of the connection.
	b, err := io.ReadAll(io.LimitReader(br, maxAnswer+1))
	if err != nil || len(b) > maxAnswer {
		return 0, nil, false, fmt.Errorf("%w: unframed body", errAnswer)
	}
	return code, append(body[:0], b...), true, nil
}

func trimEOL(b []byte) []byte { return bytes.TrimRight(b, "\r\n") }
