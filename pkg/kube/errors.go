package kube

import (
	"fmt"
	"time"
)

// ErrorKind classifies why a pod could not be read.
type ErrorKind uint8

const (
	// Unavailable: the API did not answer, or answered with an error worth
	// retrying (timeouts, 429, 5xx), until the time budget ran out.
	Unavailable ErrorKind = iota
	// NotFound: the API has no such pod.
	NotFound
	// Denied: 401 or 403; the plugin's credentials are wrong or lack rights.
	Denied
	// BadResponse: a 200 whose body is not a pod, or another 4xx.
	BadResponse
)

// APIError is a failed pod lookup. It names the pod and the last error.
type APIError struct {
	Kind     ErrorKind
	Pod      string
	Attempts int
	Err      error
}

func (e *APIError) Error() string {
	switch e.Kind {
	case NotFound:
		return fmt.Sprintf("pod %s not found in the API: %v", e.Pod, e.Err)
	case Denied:
		return fmt.Sprintf("reading pod %s: the API denied the plugin's credentials: %v", e.Pod, e.Err)
	case BadResponse:
		return fmt.Sprintf("reading pod %s: %v", e.Pod, e.Err)
	}
	return fmt.Sprintf("reading pod %s: API unavailable after %d attempts: %v", e.Pod, e.Attempts, e.Err)
}

func (e *APIError) Unwrap() error { return e.Err }

// Timeouts bound a lookup: each attempt has its own timeout and the retries
// share a total budget that must stay far below the kubelet's two-minute
// runtime request timeout.
type Timeouts struct {
	Attempt time.Duration
	Total   time.Duration
}
