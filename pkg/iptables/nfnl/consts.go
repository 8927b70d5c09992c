package nfnl

// Attributes newer than golang.org/x/sys/unix's list (linux/netfilter/nf_tables.h).
const (
	nftaTableHandle = 4
)

// Netfilter verdicts (linux/netfilter.h).
const (
	nfDrop   = 0
	nfAccept = 1
)
