package kube

// ValidNamespace reports whether s can name a namespace: a DNS-1123 label,
// 1 to 63 lower-case letters, digits and '-', not starting or ending with
// '-'. A configured name that cannot exist would silently never match.
func ValidNamespace(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}
