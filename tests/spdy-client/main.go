// A SPDY/3.1 remote-command client for rktlet's tests, built on spdystream
// (the library Kubernetes' own SPDY client uses; Debian's
// golang-github-docker-spdystream-dev), so the server is checked against an
// independent implementation. It does what client-go's v4 executor does:
// upgrade with X-Stream-Protocol-Version, open the error stream and then
// one stream per requested channel, copy them, print the status.
//
// usage: spdy-client [-stdin] [-stdout] [-stderr] [-tty] [-resize WxH] [-status FILE] URL
//
//	spdy-client -portforward PORT -send TEXT URL   (prints the reply; an error stream's text on stderr)
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"

	"github.com/moby/spdystream"
)

// bufConn reads what the HTTP response reader buffered before the socket.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func main() {
	stdin := flag.Bool("stdin", false, "send our stdin")
	stdout := flag.Bool("stdout", false, "receive stdout")
	stderr := flag.Bool("stderr", false, "receive stderr")
	tty := flag.Bool("tty", false, "a terminal (opens a resize stream)")
	resize := flag.String("resize", "", "WxH sent on the resize stream")
	statusFile := flag.String("status", "", "write the error stream's status here")
	forward := flag.Int("portforward", 0, "forward this port (portforward.k8s.io) instead of exec")
	send := flag.String("send", "", "with -portforward: what to send before reading the reply")
	flag.Parse()
	protocols := "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: v3.channel.k8s.io\r\n"
	want := "v4.channel.k8s.io"
	if *forward != 0 {
		protocols = "X-Stream-Protocol-Version: portforward.k8s.io\r\n"
		want = "portforward.k8s.io"
	}
	u, err := url.Parse(flag.Arg(0))
	if err != nil {
		fail("url: %v", err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		fail("dial: %v", err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n%s\r\n",
		u.RequestURI(), u.Host, protocols)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		fail("response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(os.Stderr, "HTTP %d: %s", resp.StatusCode, body)
		os.Exit(2)
	}
	if got := resp.Header.Get("X-Stream-Protocol-Version"); got != want {
		fail("negotiated %q", got)
	}
	sc, err := spdystream.NewConnection(bufConn{conn, br}, false)
	if err != nil {
		fail("spdy: %v", err)
	}
	go sc.Serve(spdystream.NoOpStreamHandler)
	if *forward != 0 {
		portForward(sc, *forward, *send)
		return
	}
	open := func(kind string) *spdystream.Stream { return openStream(sc, http.Header{}, kind) }
	errStream := open("error")
	var wg sync.WaitGroup
	if *stdin {
		s := open("stdin")
		go func() { io.Copy(s, os.Stdin); s.Close() }()
	}
	for _, c := range []struct {
		on   bool
		kind string
		to   io.Writer
	}{{*stdout, "stdout", os.Stdout}, {*stderr && !*tty, "stderr", os.Stderr}} {
		if c.on {
			s := open(c.kind)
			wg.Add(1)
			go func(to io.Writer) { defer wg.Done(); io.Copy(to, s) }(c.to)
		}
	}
	if *tty {
		s := open("resize")
		var w, h int
		if _, err := fmt.Sscanf(*resize, "%dx%d", &w, &h); err == nil {
			fmt.Fprintf(s, "{\"Width\":%d,\"Height\":%d}\n", w, h)
		}
	}
	status, _ := io.ReadAll(errStream)
	wg.Wait()
	if *statusFile != "" {
		os.WriteFile(*statusFile, status, 0o644)
	}
	sc.Close()
}

// portForward does what kubectl port-forward does per connection: an error
// stream (closed at once on our side), a data stream, then the copy.
func portForward(sc *spdystream.Connection, port int, send string) {
	open := func(kind string) *spdystream.Stream {
		h := http.Header{}
		h.Set("port", fmt.Sprint(port))
		h.Set("requestID", "0")
		return openStream(sc, h, kind)
	}
	errStream := open("error")
	errStream.Close()
	data := open("data")
	io.WriteString(data, send)
	reply, _ := io.ReadAll(data)
	os.Stdout.Write(reply)
	msg, _ := io.ReadAll(errStream)
	os.Stderr.Write(msg)
	sc.Close()
}

// openStream opens a stream of `kind` with the extra headers `h` and waits
// for the server's reply, as client-go does.
func openStream(sc *spdystream.Connection, h http.Header, kind string) *spdystream.Stream {
	h.Set("streamType", kind)
	s, err := sc.CreateStream(h, nil, false)
	if err != nil {
		fail("create %s: %v", kind, err)
	}
	if err := s.Wait(); err != nil {
		fail("reply for %s: %v", kind, err)
	}
	return s
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(3)
}
