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

package v1alpha1

import (
	"context"

	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/apis"
)

var _ apis.Validatable = (*SandboxSnapshot)(nil)

// Validate checks the snapshot's spec. The CRD schema enforces the same rules;
// the reconciler checks again so that a lenient CRD (OpenSandbox's own) cannot
// lead to a TaskRun for a malformed request.
func (s *SandboxSnapshot) Validate(ctx context.Context) *apis.FieldError {
	return s.Spec.Validate(ctx).ViaField("spec")
}

// Validate checks that SandboxName is a DNS-1123 subdomain.
func (s *SandboxSnapshotSpec) Validate(context.Context) *apis.FieldError {
	if s.SandboxName == "" {
		return apis.ErrMissingField("sandboxName")
	}
	if msgs := validation.IsDNS1123Subdomain(s.SandboxName); len(msgs) > 0 {
		return apis.ErrInvalidValue(s.SandboxName, "sandboxName", msgs...)
	}
	return nil
}
