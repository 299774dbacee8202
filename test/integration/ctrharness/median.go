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
	"cmp"
	"slices"
)

// Median returns the middle of xs once sorted (the upper one of an even
// count); xs is left as it was.
func Median[T cmp.Ordered](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// MedianOf returns the Median of one figure, f, of every sample.
func MedianOf[S any, T cmp.Ordered](ss []S, f func(S) T) T {
	xs := make([]T, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return Median(xs)
}
