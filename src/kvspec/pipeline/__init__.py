"""Pipeline-parallel decoding across processes (document 003, PipeInfer): the target's decoder
layers split over ranks of a torch.distributed group, the head rank embedding, sampling and
verifying."""
