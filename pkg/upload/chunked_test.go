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
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func TestReceived(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "", want: 0},
		{in: "0-0", want: 0},
		{in: "0-1", want: 2},
		{in: "0-2097151", want: 2 << 20},
		{in: "bytes=0-99", want: 100},
		{in: "5-9", wantErr: true},
		{in: "0-", wantErr: true},
		{in: "0--3", wantErr: true},
		{in: "garbage", wantErr: true},
	} {
		got, err := received(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("received(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestRefusesChunks(t *testing.T) {
	for status, want := range map[int]bool{
		http.StatusBadRequest:                   true,
		http.StatusMethodNotAllowed:             true,
		http.StatusRequestedRangeNotSatisfiable: true,
		http.StatusNotImplemented:               true,
		http.StatusUnauthorized:                 false,
		http.StatusForbidden:                    false,
		http.StatusNotFound:                     false,
		http.StatusInsufficientStorage:          false,
		http.StatusServiceUnavailable:           false,
	} {
		err := fmt.Errorf("wrapped: %w", &transport.Error{StatusCode: status})
		if got := refusesChunks(err); got != want {
			t.Errorf("refusesChunks(%d) = %v, want %v", status, got, want)
		}
	}
}

func TestRedactedURL(t *testing.T) {
	u, err := url.Parse("http://user:pw@reg.example/v2/a/blobs/uploads/1?_state=secret&digest=sha256:x")
	if err != nil {
		t.Fatal(err)
	}
	got := redactedURL(u)
	if strings.Contains(got, "secret") || strings.Contains(got, "pw") || !strings.Contains(got, "/v2/a/blobs/uploads/1") {
		t.Errorf("redactedURL = %q", got)
	}
}
