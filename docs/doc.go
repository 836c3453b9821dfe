// Package docs holds no code: its test checks that ARCHITECTURE.md's package arrows are the ones go list reports, and that the leaf packages stay leaves.
package docs
