/*
Copyright 2026 The OpenSandbox Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package ctrharness

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// NewRegistryBehindLink starts an in-process registry whose request and
// response bodies share one link of bytesPerSecond, as a registry across a
// network is: blobs go up and down no faster than the link carries them.
func NewRegistryBehindLink(bytesPerSecond int64) *Registry {
	l := newLink(bytesPerSecond, time.Now, time.Sleep)
	return serveRegistry(func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Body = struct {
				io.Reader
				io.Closer
			}{&pacedReader{r: r.Body, l: l}, r.Body}
			h.ServeHTTP(&pacedResponse{ResponseWriter: w, l: l}, r)
		})
	})
}

// linkBurst is how far behind its schedule a link may fall and still catch
// up: a sleep oversleeps, and without it the link would run slower than its
// rate.
const linkBurst = 10 * time.Millisecond

// link paces the bytes that cross it to its rate, in both directions
// together.
type link struct {
	mu    sync.Mutex
	rate  float64 // bytes per second
	free  time.Time
	now   func() time.Time
	sleep func(time.Duration)
}

func newLink(bytesPerSecond int64, now func() time.Time, sleep func(time.Duration)) *link {
	return &link{rate: float64(bytesPerSecond), now: now, sleep: sleep}
}

// carry waits until n more bytes have crossed the link.
func (l *link) carry(n int) {
	l.mu.Lock()
	now := l.now()
	if l.free.Before(now.Add(-linkBurst)) {
		l.free = now.Add(-linkBurst)
	}
	l.free = l.free.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
	wait := l.free.Sub(now)
	l.mu.Unlock()
	l.sleep(wait)
}

type pacedReader struct {
	r io.Reader
	l *link
}

// Read implements io.Reader.
func (p *pacedReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.l.carry(n)
	return n, err
}

type pacedResponse struct {
	http.ResponseWriter
	l *link
}

// Write implements io.Writer.
func (p *pacedResponse) Write(b []byte) (int, error) {
	p.l.carry(len(b))
	return p.ResponseWriter.Write(b)
}
