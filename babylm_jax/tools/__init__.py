"""Tools beside the pipeline: the hanzi facts and synthetic fMRI generators, the GPU step anatomy (a compiled step
read kernel by kernel from its HLO text and costed by a roofline)."""
