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

package upload

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// DefaultChunkSize is the size of one PATCH of a chunked blob upload: blobs
// larger than it are uploaded in chunks, and it bounds the memory one upload
// holds to resume after a transient error.
const DefaultChunkSize = 16 << 20

// ErrChunkedRefused is returned when the registry refuses the first chunk
// of an upload: the caller falls back to a monolithic upload.
var ErrChunkedRefused = errors.New("the registry refused a chunked upload")

// errUploadLost is returned when the registry no longer holds bytes it had
// acknowledged, or cannot tell how many it holds after a partial chunk: the
// upload starts again from byte 0 in a new session.
var errUploadLost = errors.New("the registry lost the upload session")

// Options configure NewChunked.
type Options struct {
	// Keychain resolves the registry credentials; anonymous when nil.
	Keychain authn.Keychain
	// Insecure allows plain HTTP and unverified certificates.
	Insecure bool
	// RootCAs verify the registry's certificate; the system's when nil.
	RootCAs *x509.CertPool
	// ChunkSize is the size of one PATCH; DefaultChunkSize when 0 or less.
	ChunkSize int
	// Logf, which must be set, reports resumes and failed cancellations.
	Logf func(format string, a ...any)
}

// Chunked uploads blobs with the OCI distribution spec's chunked upload
// (POST, PATCH with Content-Range, PUT ?digest=). After a transient error it
// asks the registry how far the upload got (GET on the upload URL, Range
// header) and resends only what is missing of the current chunk; only that
// chunk, and the next one read ahead, are held in memory.
type Chunked struct {
	client *http.Client
	repo   name.Repository
	chunk  int
	// backoff spaces a request's attempts (Step, jittered), and sleep waits
	// between them.
	backoff remote.Backoff
	sleep   func(context.Context, time.Duration) error
	logf    func(format string, a ...any)
}

// NewChunked returns a Chunked authenticated for pushing to repo and
// mounting from sources.
func NewChunked(ctx context.Context, repo name.Repository, sources []name.Repository, opts Options) (*Chunked, error) {
	auth := authn.Anonymous
	if opts.Keychain != nil {
		var err error
		if auth, err = authn.Resolve(ctx, opts.Keychain, repo); err != nil {
			return nil, fmt.Errorf("resolving credentials for %s: %w", repo, err)
		}
	}
	scopes := []string{repo.Scope(transport.PushScope)}
	for _, s := range sources {
		if s.RegistryStr() == repo.RegistryStr() {
			scopes = append(scopes, s.Scope(transport.PullScope))
		}
	}
	inner := transport.NewUserAgent(newTransport(opts.Insecure, opts.RootCAs), userAgent)
	rt, err := transport.NewWithContext(ctx, repo.Registry, auth, inner, scopes)
	if err != nil {
		return nil, fmt.Errorf("authenticating to %s: %w", repo.RegistryStr(), err)
	}
	chunk := opts.ChunkSize
	if chunk <= 0 {
		chunk = DefaultChunkSize
	}
	return &Chunked{client: &http.Client{Transport: rt}, repo: repo, chunk: chunk, backoff: retryBackoff, sleep: sleep, logf: opts.Logf}, nil
}

// Upload puts the blob d, read from open, into the repository: nothing when
// it is there already, a cross-repository mount from mount when the registry
// allows it, else a chunked upload; ErrChunkedRefused when the registry
// refuses chunks.
func (u *Chunked) Upload(ctx context.Context, d ocispec.Descriptor, mount *name.Repository, open func() (io.ReadCloser, error)) error {
	if ok, err := u.exists(ctx, d); err != nil || ok {
		return err
	}
	loc, err := u.start(ctx, d, mount)
	if err != nil || loc == "" {
		return err
	}
	_, err = u.session(ctx, loc, d, open)
	return err
}

// UploadStream puts a blob known only as it is read, the bytes open gives,
// into the repository in chunks, hashing them as they are sent: its digest
// goes with the final PUT. It returns the blob's descriptor, of mediaType;
// ErrChunkedRefused when the registry refuses chunks.
func (u *Chunked) UploadStream(ctx context.Context, mediaType string, open func() (io.ReadCloser, error)) (ocispec.Descriptor, error) {
	d := ocispec.Descriptor{MediaType: mediaType}
	loc, err := u.start(ctx, d, nil)
	if err != nil {
		return d, err
	}
	return u.session(ctx, loc, d, open)
}

// session sends the blob d (of no digest yet when streamed) into the upload
// at loc, and once more from byte 0 in a new session when the registry lost
// the upload. It returns the blob's descriptor.
func (u *Chunked) session(ctx context.Context, loc string, d ocispec.Descriptor, open func() (io.ReadCloser, error)) (ocispec.Descriptor, error) {
	for restarted := false; ; restarted = true {
		last, sent, err := u.send(ctx, loc, d, open)
		if err == nil {
			return sent, nil
		}
		// A failed session is not left to the registry's upload purge.
		u.cancel(ctx, last)
		if !errors.Is(err, errUploadLost) || restarted {
			return d, err
		}
		u.logf("blob %s: %v; starting it again from byte 0", blobName(d), err)
		if loc, err = u.start(ctx, d, nil); err != nil {
			return d, err
		}
	}
}

// blobName names blob d in messages: its digest, when it has one yet.
func blobName(d ocispec.Descriptor) string {
	if d.Digest == "" {
		return "(streamed)"
	}
	return d.Digest.String()
}

// blobsURL is the repository's blobs endpoint.
func (u *Chunked) blobsURL(rest string) string {
	return fmt.Sprintf("%s://%s/v2/%s/blobs/%s", u.repo.Scheme(), u.repo.RegistryStr(), u.repo.RepositoryStr(), rest)
}

// retry runs one registry request until it succeeds, fails permanently or
// the retry policy's attempts are spent.
func (u *Chunked) retry(ctx context.Context, do func() error) error {
	b := u.backoff
	for {
		err := do()
		if err == nil || !isTransient(err) || b.Steps <= 1 {
			return err
		}
		if err := u.sleep(ctx, b.Step()); err != nil {
			return err
		}
	}
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// do sends one request and returns the response when its status is one of
// codes; otherwise a *transport.Error (or the transport's error).
func (u *Chunked) do(ctx context.Context, method, target string, body []byte, hdr http.Header, codes ...int) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, r)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := u.client.Do(req)
	if err != nil {
		// The upload URL's query (an upload state token) stays out of errors.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = fmt.Errorf("%s %s: %w", method, redactedURL(req.URL), uerr.Err)
		}
		return nil, err
	}
	if err := transport.CheckError(resp, codes...); err != nil {
		resp.Body.Close()
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

// exists reports whether the repository already holds the blob.
func (u *Chunked) exists(ctx context.Context, d ocispec.Descriptor) (bool, error) {
	var ok bool
	err := u.retry(ctx, func() error {
		_, err := u.do(ctx, http.MethodHead, u.blobsURL(d.Digest.String()), nil, nil, http.StatusOK)
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			return nil
		}
		ok = err == nil
		return err
	})
	return ok, err
}

// start opens an upload session, trying a mount from mount first. It returns
// the upload URL, or "" when the blob was mounted.
func (u *Chunked) start(ctx context.Context, d ocispec.Descriptor, mount *name.Repository) (string, error) {
	target := u.blobsURL("uploads/")
	if mount != nil {
		target += "?" + url.Values{"mount": {d.Digest.String()}, "from": {mount.RepositoryStr()}}.Encode()
	}
	var loc string
	err := u.retry(ctx, func() error {
		resp, err := u.do(ctx, http.MethodPost, target, nil, nil, http.StatusCreated, http.StatusAccepted)
		if err != nil {
			return err
		}
		if resp.StatusCode == http.StatusCreated {
			loc = ""
			return nil
		}
		loc, err = location(resp)
		return err
	})
	return loc, err
}

// location resolves the Location header of an upload response.
func location(resp *http.Response) (string, error) {
	l := resp.Header.Get("Location")
	if l == "" {
		return "", fmt.Errorf("%s %s: %d without a Location header", resp.Request.Method, redactedURL(resp.Request.URL), resp.StatusCode)
	}
	u, err := resp.Request.URL.Parse(l)
	if err != nil {
		return "", fmt.Errorf("%s %s: Location %q: %w", resp.Request.Method, redactedURL(resp.Request.URL), l, err)
	}
	return u.String(), nil
}

// redactedURL prints u with its query values (upload state tokens) hidden,
// as go-containerregistry's errors do.
func redactedURL(u *url.URL) string {
	r := *u
	q := r.Query()
	for k := range q {
		q.Set(k, "REDACTED")
	}
	r.RawQuery = q.Encode()
	return r.Redacted()
}

// received parses a Range header ("0-<last>") into the number of bytes the
// registry holds. "0-0" and an absent header both read as 0: the spec's
// form cannot tell 0 from 1 byte, and a retried chunk settles it.
func received(h string) (int64, error) {
	h = strings.TrimPrefix(h, "bytes=")
	if h == "" {
		return 0, nil
	}
	first, last, ok := strings.Cut(h, "-")
	if !ok || first != "0" {
		return 0, fmt.Errorf("unexpected Range %q", h)
	}
	n, err := strconv.ParseInt(last, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("unexpected Range %q", h)
	}
	if n == 0 {
		return 0, nil
	}
	return n + 1, nil
}

// send uploads the blob's bytes chunk by chunk into the session at loc and
// commits it: d, or, for a streamed blob (no digest), all that open gives,
// under the digest of what was sent. The next chunk is read, and hashed,
// while one is sent. It returns the session's last upload URL and the
// blob's descriptor.
func (u *Chunked) send(ctx context.Context, loc string, d ocispec.Descriptor, open func() (io.ReadCloser, error)) (string, ocispec.Descriptor, error) {
	rc, err := open()
	if err != nil {
		return loc, d, err
	}
	defer rc.Close()
	streamed := d.Digest == ""
	var dg digest.Digester
	size := int64(u.chunk)
	if streamed {
		dg = digest.Canonical.Digester()
	} else {
		size = min(size, d.Size)
	}
	type chunk struct {
		b   []byte
		err error
	}
	free, chunks := make(chan []byte, 2), make(chan chunk, 1)
	free <- make([]byte, size)
	free <- make([]byte, size)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	// emit hands c to the sender, unless it has stopped.
	emit := func(c chunk) bool {
		select {
		case chunks <- c:
			return true
		case <-rctx.Done():
			return false
		}
	}
	go func() {
		defer close(chunks)
		var off int64
		for streamed || off < d.Size {
			var b []byte
			select {
			case b = <-free:
			case <-rctx.Done():
				return
			}
			if !streamed {
				b = b[:min(int64(len(b)), d.Size-off)]
			}
			n, err := io.ReadFull(rc, b)
			end := streamed && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))
			if err != nil && !end {
				emit(chunk{err: fmt.Errorf("reading blob %s at byte %d: %w", blobName(d), off, err)})
				return
			}
			if streamed {
				dg.Hash().Write(b[:n])
			}
			off += int64(n)
			if n > 0 && !emit(chunk{b: b[:n]}) {
				return
			}
			if end {
				return
			}
		}
	}()
	var off int64
	for c := range chunks {
		if c.err != nil {
			return loc, d, c.err
		}
		n := int64(len(c.b))
		if loc, err = u.patch(ctx, loc, c.b, off); err != nil {
			return loc, d, fmt.Errorf("bytes %d-%d: %w", off, off+n-1, err)
		}
		off += n
		free <- c.b[:cap(c.b)]
	}
	if err := ctx.Err(); err != nil {
		return loc, d, err
	}
	if streamed {
		d.Digest, d.Size = dg.Digest(), off
	}
	return loc, d, u.commit(ctx, loc, d)
}

// refusesChunks tells a registry that does not take Content-Range PATCHes
// from a failing one.
func refusesChunks(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	switch terr.StatusCode {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType,
		http.StatusRequestedRangeNotSatisfiable, http.StatusNotImplemented:
		return true
	}
	return false
}

func isRangeError(err error) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == http.StatusRequestedRangeNotSatisfiable
}

// patch sends chunk, which starts at byte off of the blob, and returns the
// next upload URL (on failure, the last one known). After a transient error
// or a 416 it asks the registry how many bytes it holds and resends the rest
// of the chunk from there.
func (u *Chunked) patch(ctx context.Context, loc string, chunk []byte, off int64) (string, error) {
	end := off + int64(len(chunk))
	var sent int64 // bytes of chunk the registry holds
	b := u.backoff
	for attempt := 1; ; attempt++ {
		hdr := http.Header{
			"Content-Type":  {"application/octet-stream"},
			"Content-Range": {fmt.Sprintf("%d-%d", off+sent, end-1)},
		}
		resp, err := u.do(ctx, http.MethodPatch, loc, chunk[sent:], hdr, http.StatusAccepted, http.StatusNoContent)
		if err == nil {
			next, lerr := location(resp)
			got, rerr := received(resp.Header.Get("Range"))
			if err = errors.Join(lerr, rerr); err != nil {
				return loc, err
			}
			if got == end {
				return next, nil
			}
			// The registry took less than it was sent: settle it below.
			loc = next
			err = fmt.Errorf("registry holds %d bytes after a PATCH up to %d", got, end)
		} else if off == 0 && sent == 0 && attempt == 1 && refusesChunks(err) {
			return loc, fmt.Errorf("%w: %w", ErrChunkedRefused, err)
		} else if !isTransient(err) && !isRangeError(err) {
			return loc, err
		}
		if b.Steps <= 1 {
			return loc, err
		}
		if serr := u.sleep(ctx, b.Step()); serr != nil {
			return loc, serr
		}
		got, next, serr := u.status(ctx, loc)
		switch {
		case serr == nil:
			loc = next
		case isTransient(serr):
			continue
		case isRangeError(err) || sent > 0:
			// No upload status, and the registry holds an unknown part of
			// the chunk.
			return loc, fmt.Errorf("%w: %w (upload status: %w)", errUploadLost, err, serr)
		default:
			// No upload status: assume the registry dropped the partial
			// chunk; a 416 on the resend says otherwise.
			continue
		}
		if got < off || got > end {
			return loc, fmt.Errorf("%w: it holds %d bytes, this chunk is %d-%d", errUploadLost, got, off, end-1)
		}
		u.logf("blob upload to %s: %v; the registry holds %d bytes, resending from there (%d bytes of this chunk)", u.repo, err, got, end-got)
		sent = got - off
		if got == end {
			return loc, nil
		}
	}
}

// status asks the registry how many bytes of the upload at loc it holds.
func (u *Chunked) status(ctx context.Context, loc string) (int64, string, error) {
	resp, err := u.do(ctx, http.MethodGet, loc, nil, nil, http.StatusNoContent, http.StatusOK)
	if err != nil {
		return 0, "", err
	}
	next, err := location(resp)
	if err != nil {
		return 0, "", err
	}
	got, err := received(resp.Header.Get("Range"))
	return got, next, err
}

// commit closes the upload with the blob's digest. When a retried PUT is
// refused, the blob may already be committed by the lost first one.
func (u *Chunked) commit(ctx context.Context, loc string, d ocispec.Descriptor) error {
	target, err := url.Parse(loc)
	if err != nil {
		return err
	}
	q := target.Query()
	q.Set("digest", d.Digest.String())
	target.RawQuery = q.Encode()
	retried := false
	err = u.retry(ctx, func() error {
		_, err := u.do(ctx, http.MethodPut, target.String(), nil, nil, http.StatusCreated, http.StatusNoContent, http.StatusAccepted)
		if err != nil && !isTransient(err) && retried {
			if ok, herr := u.exists(ctx, d); herr == nil && ok {
				return nil
			}
		}
		retried = true
		return err
	})
	if err != nil {
		return fmt.Errorf("committing blob %s: %w", d.Digest, err)
	}
	return nil
}

// cancel deletes an upload session, best effort, also when ctx is done.
func (u *Chunked) cancel(ctx context.Context, loc string) {
	ctx, done := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer done()
	if _, err := u.do(ctx, http.MethodDelete, loc, nil, nil, http.StatusNoContent, http.StatusOK, http.StatusAccepted, http.StatusNotFound); err != nil {
		u.logf("cancelling upload to %s: %v", u.repo, err)
	}
}
