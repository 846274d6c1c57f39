# Convenience targets; each is one script under scripts/.
.PHONY: bench bench-smoke
bench:
	bash scripts/bench.sh
bench-smoke:
	bash scripts/bench.sh --smoke
