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

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// request identifies API requests the way apiserver_request_total labels them.
type request struct {
	Verb        string `json:"verb"`
	Group       string `json:"group,omitempty"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Code        string `json:"code"`
}

func (r request) String() string {
	res := r.Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	return fmt.Sprintf("%s %s %s", r.Verb, res, r.Code)
}

// isRead reports whether the request reads objects (a GET or a LIST, not a
// WATCH).
func (r request) isRead() bool { return r.Verb == "GET" || r.Verb == "LIST" }

// isWrite reports whether the request changes an object.
func (r request) isWrite() bool {
	switch r.Verb {
	case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		return true
	}
	return false
}

// counts holds request counts.
type counts map[request]float64

// scrapeRequests reads apiserver_request_total from the apiserver's /metrics.
func scrapeRequests(ctx context.Context, c *clients) (counts, error) {
	raw, err := c.kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the apiserver's /metrics: %w", err)
	}
	out := counts{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const name = "apiserver_request_total{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			continue
		}
		l := labels(line[len(name):end])
		out[request{Verb: l["verb"], Group: l["group"], Resource: l["resource"], Subresource: l["subresource"], Code: l["code"]}] += v
	}
	return out, sc.Err()
}

// labels parses `a="x",b="y"` (label values here hold no quotes or commas).
func labels(s string) map[string]string {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			m[k] = strings.Trim(v, `"`)
		}
	}
	return m
}

// sub returns a - b, without zero entries.
func (a counts) sub(b counts) counts {
	out := counts{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

// sorted lists the entries, largest first.
func (a counts) sorted() []request {
	keys := make([]request, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if a[keys[i]] != a[keys[j]] {
			return a[keys[i]] > a[keys[j]]
		}
		return keys[i].String() < keys[j].String()
	})
	return keys
}

// requestCounter counts the harness's own requests, labelled like the
// apiserver's metric, so that they can be subtracted from it.
type requestCounter struct {
	mu sync.Mutex
	c  counts
}

func (rc *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil {
			r := parsePath(req.URL.Path)
			r.Verb = req.Method
			switch {
			case req.Method == http.MethodGet && req.URL.Query().Get("watch") == "true":
				r.Verb = "WATCH"
			case req.Method == http.MethodGet && isCollection(req.URL.Path):
				r.Verb = "LIST"
			}
			if req.Method == http.MethodPatch && req.Header.Get("Content-Type") == "application/apply-patch+yaml" {
				r.Verb = "APPLY"
			}
			r.Code = strconv.Itoa(resp.StatusCode)
			rc.mu.Lock()
			if rc.c == nil {
				rc.c = counts{}
			}
			rc.c[r]++
			rc.mu.Unlock()
		}
		return resp, err
	})
}

// snapshot returns a copy of the counts so far.
func (rc *requestCounter) snapshot() counts {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := counts{}
	for k, v := range rc.c {
		out[k] = v
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// parsePath finds group, resource and subresource in an API path such as
// /apis/tekton.dev/v1/namespaces/ns/taskruns/name/status.
func parsePath(path string) request {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var r request
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		r.Group = segs[1]
		segs = segs[3:]
	default:
		return r
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	if len(segs) > 0 {
		r.Resource = segs[0]
	}
	if len(segs) > 2 {
		r.Subresource = segs[2]
	}
	return r
}

// isCollection reports whether an API path names a collection, such as
// /api/v1/namespaces/ns/pods, rather than one object.
func isCollection(path string) bool {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		segs = segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		segs = segs[3:]
	default:
		return false
	}
	if len(segs) >= 3 && segs[0] == "namespaces" {
		segs = segs[2:]
	}
	return len(segs) == 1
}
