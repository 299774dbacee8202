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
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPlainHTTPOnlyWhenInsecure: a loopback registry is plain HTTP; the
// committer must not fall back to it on its own.
func TestPlainHTTPOnlyWhenInsecure(t *testing.T) {
	s := httptest.NewServer(registry.New())
	defer s.Close()
	host := strings.TrimPrefix(s.URL, "http://")
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}

	strict, err := name.NewTag(host+"/a/b:1", name.StrictValidation)
	if err != nil {
		t.Fatal(err)
	}
	err = remote.Write(strict, img, remote.WithTransport(newTransport(false)))
	if !errors.Is(err, ErrPlainHTTPRefused) && (err == nil || !strings.Contains(err.Error(), "insecure-registry")) {
		t.Fatalf("insecure=false: want plain HTTP refused, got %v", err)
	}

	insecure, err := name.NewTag(host+"/a/b:1", name.StrictValidation, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(insecure, img, remote.WithTransport(newTransport(true))); err != nil {
		t.Fatalf("insecure=true: %v", err)
	}
}

func TestTransportRefusesHTTPDirectly(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://10.0.0.1:5000/v2/", nil)
	if _, err := newTransport(false).RoundTrip(req); !errors.Is(err, ErrPlainHTTPRefused) {
		t.Fatalf("got %v", err)
	}
}
