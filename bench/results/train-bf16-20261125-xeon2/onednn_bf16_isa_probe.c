#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define CK(x) do{dnnl_status_t ss_=(x); if(ss_){printf("fail %s: %d\n",#x,ss_);exit(1);}}while(0)
static void md2(dnnl_memory_desc_t*d,int r,int c,int trans,dnnl_data_type_t t){dnnl_dims_t dd={r,c};dnnl_dims_t st={trans?1:c, trans?r:1};CK(dnnl_memory_desc_init_by_strides(d,2,dd,t,st));}
static void run(dnnl_engine_t eng, dnnl_stream_t st, int M,int N,int K,int ta,int tb,dnnl_data_type_t ti){
  dnnl_memory_desc_t a,b,c; md2(&a,M,K,ta,ti); md2(&b,K,N,tb,ti); md2(&c,M,N,0,dnnl_f32);
  dnnl_matmul_desc_t md; CK(dnnl_matmul_desc_init(&md,&a,&b,NULL,&c));
  dnnl_primitive_desc_t pd; CK(dnnl_primitive_desc_create(&pd,&md,NULL,eng,NULL));
  const char*impl; dnnl_primitive_desc_query(pd,dnnl_query_impl_info_str,0,&impl);
  dnnl_primitive_t p; CK(dnnl_primitive_create(&p,pd));
  dnnl_memory_t ma,mb,mc; CK(dnnl_memory_create(&ma,&a,eng,DNNL_MEMORY_ALLOCATE));
  CK(dnnl_memory_create(&mb,&b,eng,DNNL_MEMORY_ALLOCATE));CK(dnnl_memory_create(&mc,&c,eng,DNNL_MEMORY_ALLOCATE));
  dnnl_exec_arg_t args[3]={{DNNL_ARG_SRC,ma},{DNNL_ARG_WEIGHTS,mb},{DNNL_ARG_DST,mc}};
  double best=1e9; for(int r=0;r<6;r++){double t=now(); CK(dnnl_primitive_execute(p,st,3,args)); dnnl_stream_wait(st); t=now()-t; if(t<best)best=t;}
  double tc=now(); for(int r=0;r<20;r++){dnnl_primitive_desc_t pd2; dnnl_primitive_desc_create(&pd2,&md,NULL,eng,NULL); dnnl_primitive_t p2; dnnl_primitive_create(&p2,pd2); dnnl_primitive_destroy(p2); dnnl_primitive_desc_destroy(pd2);} tc=(now()-tc)/20;
  printf("%s ta%d tb%d %dx%dx%d impl=%s %.1f GFLOP/s create %.1f us\n",ti==dnnl_f32?"f32 ":"bf16",ta,tb,M,N,K,impl,2.0*M*N*K/best/1e9,tc*1e6);
}
int main(void){dnnl_engine_t e;dnnl_stream_t s;CK(dnnl_engine_create(&e,dnnl_cpu,0));CK(dnnl_stream_create(&s,e,dnnl_stream_default_flags));
 int t[][2]={{0,1},{0,0},{1,0}};
 for(int i=0;i<3;i++){run(e,s,2048,1376,512,t[i][0],t[i][1],dnnl_bf16);run(e,s,2048,1376,512,t[i][0],t[i][1],dnnl_f32);}
 run(e,s,2048,32000,512,0,1,dnnl_bf16); run(e,s,32000,512,2048,1,0,dnnl_bf16); run(e,s,2048,512,32000,0,0,dnnl_bf16);
 run(e,s,64,512,512,0,1,dnnl_bf16);run(e,s,64,512,512,0,1,dnnl_f32);
}
