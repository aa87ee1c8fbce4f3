// Package ads is clientlib's xDS transport: one aggregated (ADS)
// state-of-the-world stream carrying the subscriptions of every type.
//
// It owns the protocol only: subscriptions, ACK and NACK with the last
// accepted version and the latest nonce, and reconnection with exponential
// backoff and full jitter. What a resource means, and whether it is
// acceptable, is the Handler's decision.
package ads
